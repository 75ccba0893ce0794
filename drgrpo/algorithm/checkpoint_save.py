"""Checkpoints saved whole or not at all, and a full disk during a save said in one line (a `DrGRPOTrainer` mixin).

transformers' `Trainer._save_checkpoint` writes `output_dir/checkpoint-N` in place, file after file, without fsync;
a crash or a full disk leaves a folder that looks like a checkpoint and is not one. `StagedCheckpoints` lets it write
the very same files into `output_dir/.staging/checkpoint-N` instead (by answering `_get_output_dir` with the staging
folder during the save), adds the project's own state files there, and only then, once every process has written
its part, fsyncs the folder and renames it into place (`drgrpo.core.durable.publish_folder`). transformers' rotation
(`save_total_limit`) then runs on the real folder.
"""

from __future__ import annotations

from pathlib import Path

from transformers.trainer_utils import rotate_checkpoints

from drgrpo.core.checkpoints import newest_complete_checkpoint
from drgrpo.core.disk import disk_full, disk_full_error
from drgrpo.core.durable import publish_folder, remove_staging, staging_root


def folder_bytes(folder: Path | None) -> int | None:
    """The bytes of every file under `folder`, or None without one."""
    return None if folder is None else sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


class StagedCheckpoints:
    """Mixin for a transformers `Trainer`: each checkpoint is staged, completed, fsynced and renamed into place.

    A subclass may define `_write_checkpoint_extras(folder)` to add its own files to the staged folder (they are then
    part of the same atomic save)."""

    _staging_run_dir: str | None = None

    # Override: during a save, transformers' "run directory" is the staging folder, so that every file it (and TRL,
    # and DeepSpeed on every rank) writes for `checkpoint-N` lands in `.staging/checkpoint-N`.
    def _get_output_dir(self, trial) -> str:
        if self._staging_run_dir is not None:
            return str(staging_root(self._staging_run_dir))
        return super()._get_output_dir(trial)

    # Override: stage, complete, fsync and rename the checkpoint (module docstring); a full disk is one line.
    def _save_checkpoint(self, model, trial) -> None:
        run_dir = super()._get_output_dir(trial)
        name = f"checkpoint-{self.state.global_step}"
        staged, final = staging_root(run_dir) / name, Path(run_dir) / name
        saves = self.args.should_save
        if saves:
            remove_staging(run_dir)  # what an interrupted save left
        self.accelerator.wait_for_everyone()  # no process writes into the staging folder while it is being removed
        self._staging_run_dir, published = run_dir, False
        try:
            super()._save_checkpoint(model, trial)
            if saves:
                self._write_checkpoint_extras(staged)
                self._point_best_checkpoint_at(run_dir, staged)
            self.accelerator.wait_for_everyone()  # every process has written its part (ZeRO shards, RNG states)
            if saves:
                publish_folder(staged, final)
                remove_staging(run_dir)  # the staging folder, empty now
            published = True
        except Exception as error:
            if not disk_full(error, run_dir):
                raise
            remove_staging(run_dir)  # free what the partial checkpoint took before saying how much is free
            newest = newest_complete_checkpoint(run_dir)
            kept = f"{newest.name} stays the newest complete checkpoint" if newest else "no checkpoint is saved yet"
            raise disk_full_error(run_dir, f"saving {name}", kept, folder_bytes(newest)) from error
        finally:
            self._staging_run_dir = None
            if saves and not published:
                remove_staging(run_dir)
        if saves:
            rotate_checkpoints(run_dir, self.args.save_total_limit, self.state.best_model_checkpoint, use_mtime=True)

    def _write_checkpoint_extras(self, folder: Path) -> None:
        """Files of the subclass's own saved with the checkpoint (main process only); none by default."""

    def _point_best_checkpoint_at(self, run_dir: str, staged: Path) -> None:
        """transformers records the best checkpoint by the folder it just wrote, the staging one: name the final
        folder instead, in the state and in the staged `trainer_state.json`."""
        best = self.state.best_model_checkpoint
        if best is not None and Path(best).parent == staging_root(run_dir):
            self.state.best_model_checkpoint = str(Path(run_dir) / Path(best).name)
            self.state.save_to_json(str(staged / "trainer_state.json"))
