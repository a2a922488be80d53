"""Videos of games: RGB screens, one per agent step, written to MP4 files by OpenCV.

OpenCV's wheel carries its own FFmpeg, which encodes codec `mp4v` (MPEG-4 Part 2): nothing else
to install. mp4v needs even frame sizes: a screen of odd height or width gets its last row or
column repeated (OpenCV would otherwise drop one silently).
"""

import os

import cv2
import numpy as np

CODEC = "mp4v"


class VideoError(RuntimeError):
    """A video that cannot be written: its directory or file, or a screen unlike the first."""


class VideoWriter:
    """Writes RGB screens, uint8 [H, W, 3], one at a time, to the MP4 file `path` at `fps`.

    The file (in an existing directory) is opened at the first screen, whose shape every later
    one must have. Screens go to the file as they come, so a long game holds no memory; until
    `close` they go to `<name>.partial.mp4`, so that a process killed mid-game leaves no
    unplayable file under the video's name.
    """

    def __init__(self, path, fps):
        self.path = path
        self._partial_path = "{}.partial{}".format(*os.path.splitext(path))
        self.num_frames = 0
        self._fps = fps
        self._writer = None
        self._shape = None

    def write(self, screen):
        """Appends `screen`, uint8 [H, W, 3] RGB, as the video's next frame."""
        screen = np.asarray(screen)
        if self._writer is None:
            self._open(screen)
        if screen.shape != self._shape or screen.dtype != np.uint8:
            raise VideoError(
                f"{self.path}: screen {self.num_frames} is {screen.dtype} {list(screen.shape)}, "
                f"the first was uint8 {list(self._shape)}"
            )
        height, width = self._shape[:2]
        frame = cv2.cvtColor(screen, cv2.COLOR_RGB2BGR)
        frame = cv2.copyMakeBorder(frame, 0, height % 2, 0, width % 2, cv2.BORDER_REPLICATE)
        self._writer.write(frame)
        self.num_frames += 1

    def _open(self, screen):
        if screen.ndim != 3 or screen.shape[2] != 3 or screen.dtype != np.uint8:
            raise VideoError(
                f"{self.path}: a screen is uint8 [H, W, 3] RGB, not {screen.dtype} "
                f"{list(screen.shape)}"
            )
        self._shape = screen.shape
        height, width = screen.shape[:2]
        size = (width + width % 2, height + height % 2)
        self._writer = cv2.VideoWriter(
            self._partial_path, cv2.VideoWriter_fourcc(*CODEC), self._fps, size
        )
        if not self._writer.isOpened():
            raise VideoError(f"{self.path}: OpenCV cannot write an {CODEC} MP4 file there")

    def close(self):
        """Finishes the file and gives it its name (none is made without a screen)."""
        if self._writer is not None:
            self._writer.release()
            self._writer = None
            os.replace(self._partial_path, self.path)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


class GameRecorder:
    """One video per game: the screen the agent acted on at each of its steps, from the game's
    first screen to the one of its last step (so as many frames as the game has agent steps).

    The files are `directory/<level_name>-<frames>.mp4` (a `/` of the level name becomes `_`),
    with `-game<k>` before `.mp4` (k from 1) when `num_games` > 1; `frames` names the
    checkpoint's environment frames; `fps`: frames per second of the videos.
    """

    def __init__(self, directory, level_name, frames, num_games, fps):
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            raise VideoError(f"{directory}: cannot make the directory ({e.strerror})") from e
        if not os.access(directory, os.W_OK):
            raise VideoError(f"{directory}: not writable")
        self._prefix = os.path.join(directory, f"{level_name.replace('/', '_')}-{frames}")
        self._num_games = num_games
        self._fps = fps
        self._games = 0
        self._writer = None

    def add(self, screen):
        """The screen, uint8 [H, W, 3] RGB, that the agent acts on at this step."""
        if self._writer is None:
            self._games += 1
            suffix = f"-game{self._games}" if self._num_games > 1 else ""
            self._writer = VideoWriter(f"{self._prefix}{suffix}.mp4", self._fps)
        self._writer.write(screen)

    def end_game(self):
        """Finishes the game's video; returns its path."""
        writer, self._writer = self._writer, None
        writer.close()
        return writer.path
