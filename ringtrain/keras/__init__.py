"""ringtrain.keras: checkpoints, resume and progress for your own tf.keras + Horovod script.

A script written from Horovod's tf.keras recipe gains, with three added lines, rank-0 atomic
checkpoints to the launch's ``--checkpoint`` URL (a path, file://, s3://, hdfs://; by default
the run directory), automatic resume of weights, optimizer state and epoch on every rank after
a restart, and progress reports for the launcher's live view and stall detection::

    import ringtrain.keras as rt                                  # +1
    ...
    model.compile(optimizer=hvd.DistributedOptimizer(opt), loss=..., metrics=[...])
    initial_epoch = rt.resume(model)                              # +2
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), ...]
    callbacks += rt.callbacks(batch_size=batch_size)              # +3
    model.fit(x, y, epochs=epochs, initial_epoch=initial_epoch, callbacks=callbacks, ...)

A custom loop (``tf.GradientTape`` + ``hvd.DistributedGradientTape``) uses ``resume`` and
``save`` the same way::

    start = rt.resume(model, optimizer)
    for epoch in range(start, epochs):
        ...                                       # train one epoch
        rt.save(model, optimizer, epoch=epoch + 1)  # rank 0 commits; reports progress

Under ``--elastic`` a custom loop reads its batches through ``rt.batches(dataset, epoch)``
(the dataset itself otherwise): it commits to memory every 10 steps and, after a reset,
starts the epoch at the committed step.

What is saved: ``tf.train.Checkpoint(model=..., optimizer=..., epoch=...)`` (a ``.keras`` file
cannot reload a Horovod-wrapped optimizer). Rank 0 writes it locally, then commits it through
``ringtrain.checkpoint`` (files under a unique prefix, a manifest with sizes and sha256 written
last with exclusive create), keeping the newest ``keep``. ``resume``: rank 0 fetches the newest
checkpoint whose files verify and broadcasts the resume point; rank 0 restores, then every
model and optimizer variable is broadcast from rank 0, so all ranks continue with identical
state. Only rank 0 touches the storage. Outside ringtrain (plain ``horovodrun`` or ``python``)
everything works the same with checkpoints under ``./checkpoints`` unless ``url`` is given.

Under ``ringtrain launch --elastic`` the same three lines make the script elastic: every rank
commits its state to memory every ``commit_every`` steps (10), and when a rank or host is lost
(or one joins) the survivors run the script again in their own processes and resume from the
newest in-memory commit, mid-epoch, with the learning rate the script sets for the new world
size (``memory``). Scripts written with ``hvd.elastic.run`` keep Horovod's own state.

The same calls work in a script using TensorFlow's own ``MultiWorkerMirroredStrategy`` or
``ParameterServerStrategy`` (``ringtrain launch --strategy tf-multiworker|tf-ps``, or any
``TF_CONFIG``): ``ringtrain.keras.world`` says who rank 0 is and how to broadcast there.

Modules: ``restore`` (resume), ``epochs`` (callbacks, save, the commit), ``state`` (what they
share: checkpoint URL, stores, staging), ``world`` (who trains together), ``steps`` (every
rank's step times), ``memory`` (in-memory commits and resets under ``--elastic``),
``uploader`` (rank 0's uploads in the background: training goes on while a checkpoint
commits; ``wait_for_commits()`` waits for the one in flight), ``fitend`` (``fit``'s own
tf.data iterator freed beside the script at its end: TensorFlow 2.15 can wait 60 s there).
"""

from __future__ import annotations

from ringtrain.keras.epochs import DEFAULT_GRACE_S as DEFAULT_GRACE_S
from ringtrain.keras.epochs import CommitCheckpoint as CommitCheckpoint
from ringtrain.keras.epochs import EpochProgressCallback as EpochProgressCallback
from ringtrain.keras.epochs import ProgressCallback as ProgressCallback
from ringtrain.keras.epochs import callbacks, save
from ringtrain.keras.memory import batches
from ringtrain.keras.restore import resume
from ringtrain.keras.restore import resumed as resumed
from ringtrain.keras.state import CKPT_PREFIX as CKPT_PREFIX
from ringtrain.keras.state import FORMAT as FORMAT
from ringtrain.keras.state import ResumePoint, checkpoint_url
from ringtrain.keras.steps import StepTimer as StepTimer
from ringtrain.keras.uploader import UPLOADER
from ringtrain.rank.progress import report as progress
from ringtrain.rank.progress import step_time

__all__ = [
    "ResumePoint", "batches", "callbacks", "checkpoint_url", "progress", "resume", "save",
    "step_time", "wait_for_commits",
]


def wait_for_commits() -> None:
    """Wait for rank 0's checkpoint upload in flight (``save`` and ``callbacks`` upload in the
    background); its failure is raised here. The rank entry of ``ringtrain launch`` and the
    end of ``model.fit`` already wait."""
    UPLOADER.wait()
