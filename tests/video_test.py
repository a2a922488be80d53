"""video.py writes MP4 files OpenCV reads back as written; environments show their native
screens; `experiment.py --mode=test --record_video` writes one video per game, a frame per step."""

import re

import cv2
import numpy as np
import pytest
import tensorflow as tf

import checkpointing
import config
import environments
import video
from roles import build_agent
from tests.training_settings import CARTPOLE, CARTPOLE_SETTINGS

COLORS = np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 255]], np.uint8)


def screens(num_frames, height, width):
    """[T, H, W, 3] uint8: solid red, green, blue, white frames in turn."""
    colors = COLORS[np.arange(num_frames) % len(COLORS)]
    return np.broadcast_to(colors[:, None, None, :], (num_frames, height, width, 3)).copy()


def read_video(path):
    """(frames [T, H, W, 3] RGB, fps) of the video file at `path`, read by OpenCV."""
    capture = cv2.VideoCapture(str(path))
    assert capture.isOpened(), path
    fps = capture.get(cv2.CAP_PROP_FPS)
    frames = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
    capture.release()
    return np.array(frames), fps


def test_frames_read_back_as_written(tmp_path):
    written = screens(12, 210, 160)
    path = str(tmp_path / "game.mp4")

    with video.VideoWriter(path, fps=15) as writer:
        for screen in written:
            writer.write(screen)

    frames, fps = read_video(path)
    assert frames.shape == (12, 210, 160, 3)
    assert fps == 15
    assert writer.num_frames == 12
    # mp4v is lossy: each frame's mean colour is the one written (red stays red: RGB order).
    np.testing.assert_allclose(frames.mean(axis=(1, 2)), written.mean(axis=(1, 2)), atol=12)


def test_a_video_has_its_name_only_once_finished(tmp_path):
    """A process killed mid-game leaves a partial file, never an unplayable one by the name."""
    path = tmp_path / "game.mp4"
    writer = video.VideoWriter(str(path), fps=15)
    writer.write(np.zeros((4, 6, 3), np.uint8))
    assert not path.exists() and (tmp_path / "game.partial.mp4").exists()
    writer.close()
    assert path.exists() and not (tmp_path / "game.partial.mp4").exists()
    assert read_video(path)[0].shape == (1, 4, 6, 3)


def test_a_screen_of_odd_size_is_padded_to_an_even_one(tmp_path):
    path = str(tmp_path / "odd.mp4")

    with video.VideoWriter(path, fps=50) as writer:
        for screen in screens(3, 33, 47):
            writer.write(screen)

    frames, _ = read_video(path)
    assert frames.shape == (3, 34, 48, 3)


def test_a_screen_of_another_shape_is_refused_naming_the_file(tmp_path):
    path = str(tmp_path / "game.mp4")
    with video.VideoWriter(path, fps=15) as writer:
        writer.write(screens(1, 210, 160)[0])
        with pytest.raises(video.VideoError, match=re.escape(f"{path}: screen 1 is uint8")):
            writer.write(screens(1, 84, 84)[0])


def test_the_recorder_names_one_video_per_game(tmp_path):
    recorder = video.GameRecorder(str(tmp_path / "videos"), "ALE/Pong-v5", 4000, 2, fps=15)
    paths = []
    for steps in (3, 5):
        for screen in screens(steps, 210, 160):
            recorder.add(screen)
        paths.append(recorder.end_game())

    assert paths == [str(tmp_path / "videos" / f"ALE_Pong-v5-4000-game{k}.mp4") for k in (1, 2)]
    assert [len(read_video(path)[0]) for path in paths] == [3, 5]


def test_a_recorder_of_one_game_names_its_video_without_game_number(tmp_path):
    recorder = video.GameRecorder(str(tmp_path), "CartPole-v1", 0, 1, fps=50)
    recorder.add(screens(1, 400, 600)[0])
    assert recorder.end_game() == str(tmp_path / "CartPole-v1-0.mp4")


def test_environments_show_their_native_screens():
    atari = environments.create_vector_environment(
        "PongNoFrameskip-v4", num_envs=1, seed=0, is_test=True, screens=True
    )
    cartpole = environments.create_vector_environment("CartPole-v1", 1, seed=0, screens=True)
    for env in (atari, cartpole):
        env.initial()
        env.step(np.zeros([1], np.int32))
    assert atari.observation_spec[0] == (84, 84, 4)
    assert atari.screen().shape == (210, 160, 3) and atari.screen().dtype == np.uint8
    assert atari.screen_fps == 15
    assert cartpole.screen().shape == (400, 600, 3) and cartpole.screen().dtype == np.uint8
    assert cartpole.screen_fps == 50
    atari.close()
    cartpole.close()


def test_an_environment_without_rgb_rendering_says_it_shows_no_screen():
    with pytest.raises(environments.UnknownEnvironmentError, match="PixelCatch-v0.*no screen"):
        environments.create_environment("PixelCatch-v0", seed=0, screens=True)


def test_evaluation_records_a_video_of_each_game(spawn, tmp_path):
    # A CartPole checkpoint at 1234 frames, written as the learner writes it (untrained agent).
    agent = build_agent(config.Config(**CARTPOLE_SETTINGS))[0]
    frames = tf.Variable(1234, dtype=tf.int64, name="environment_frames")
    checkpointing.Checkpointer(str(tmp_path), agent=agent, environment_frames=frames).save()
    videos = tmp_path / "videos"

    evaluation = spawn(
        [
            *CARTPOLE,
            f"--logdir={tmp_path}",
            "--mode=test",
            "--test_num_episodes=2",
            f"--record_video={videos}",
        ],
        "test",
    )

    assert evaluation.wait(timeout=300) == 0, evaluation.log()[-3000:]
    steps = [
        int(n) for n in re.findall(r"episode \d: return \S+ \((\d+) steps\)", evaluation.log())
    ]
    assert len(steps) == 2
    for game, game_steps in enumerate(steps, start=1):
        path = videos / f"CartPole-v1-1234-game{game}.mp4"
        assert f"video of episode {game}: {path}" in evaluation.log()
        frames, fps = read_video(path)
        # One frame per agent step: the screen the agent acted on (from the game's first).
        assert frames.shape == (game_steps, 400, 600, 3)
        assert fps == 50
