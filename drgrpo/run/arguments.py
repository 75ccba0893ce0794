"""The train script's own arguments: what a run needs beside the trainer's config (`DrGRPOConfig`) and the model's."""

from __future__ import annotations

from dataclasses import dataclass

from drgrpo.data import DataArguments
from drgrpo.run.output_guard import OutputDirArguments
from rewards import RewardArguments


@dataclass
class ScriptArguments(DataArguments, RewardArguments, OutputDirArguments):
    """Arguments of `scripts/train.py` that are neither trainer nor model settings: the data and prompt settings
    (`drgrpo.data.DataArguments`), the reward settings (`rewards.RewardArguments`) and the output directory guard
    (`drgrpo.run.output_guard.OutputDirArguments`)."""
