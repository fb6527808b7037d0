"""Training: oslo.Optimizer (with its training settings and checkpoints) and
oslo.TrainStepResult, and the checkpoint tools oslo.merge, oslo.reshard
and oslo.inspect, re-exported by the package (oslo/__init__.py)."""

import os

import numpy as _np

from . import capi as _c
from ._enums import LRSchedule, OptimizerKind, _dtype, _enum
from ._errors import InvalidArgumentError, Status
from ._handle import _Handle


class TrainStepResult:
    """What Model.train_step and Optimizer.step report
    (oslo_train_step_result). mean_loss, grad_norm and lr are meaningful
    when `stepped`; grad_norm is NaN when neither clipping nor loss scaling
    asked for it; `step` counts the updates applied so far."""

    __slots__ = ("loss", "stepped", "skipped", "mean_loss", "grad_norm", "lr", "loss_scale",
                 "step")

    @classmethod
    def _of(cls, r):
        x = cls.__new__(cls)
        x.loss = r.loss
        x.stepped = bool(r.stepped)
        x.skipped = bool(r.skipped)
        x.mean_loss = r.mean_loss
        x.grad_norm = r.grad_norm
        x.lr = r.lr
        x.loss_scale = r.loss_scale
        x.step = r.step
        return x

    def __repr__(self):
        return ("TrainStepResult(" +
                ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")")


class Optimizer(_Handle):
    """An optimizer over every parameter of a Model (this rank's slices),
    with its learning-rate schedule, gradient clipping and loss scaler, and
    the training settings it runs the train steps with
    (oslo_optimizer_create). Defaults are PyTorch's (torch.optim.AdamW /
    SGD, torch.amp.GradScaler) and Hugging Face Trainer's (no weight decay
    for 1-D parameters unless decay_1d).

    The update rule (oslo_optimizer_options): kind: "adamw" or "sgd"
    (OptimizerKind); schedule: "constant", "constant_with_warmup", "linear"
    or "cosine" (LRSchedule; linear and cosine need total_steps > 0);
    max_grad_norm > 0 clips the global gradient norm; loss_scaling: None
    (on for f16 models), True or False.

    The training settings (oslo_train_options): grad_accum_steps:
    micro-batches per optimizer step; zero_stage, bucket_bytes,
    micro_batches and pipeline_head_split below.

    Data parallelism is automatic: when the context's data-parallel size is
    above 1, the gradients are averaged over the data-parallel group as
    PyTorch's DistributedDataParallel does (each data rank passes its own
    batch; train_step's loss is the mean over the data ranks), reduced in
    buckets of bucket_bytes of f32 gradient (default 25 MiB, DDP's
    bucket_cap_mb). zero_stage (DeepSpeed ZeRO): 0 (default) none; 1
    partitions the optimizer state and f32 master weights over the
    data-parallel group; 2 the gradients too; 3 the parameters too.

    Pipeline parallelism: micro_batches (default 1) cuts each train_step's
    batch into that many micro-batches; with pipeline stages (the
    context's pipeline-parallel size above 1) they run through the stages
    in 1F1B order, every stage passing the same batch, the loss coming
    from the last stage (zero_stage 0 or 1 only). pipeline_head_split
    (tied word embeddings, one model chunk per rank): 0 (default) off; a
    fraction in (0, 1] of each micro-batch's tokens whose head and loss the
    first stage runs with its token table; -1 the share that equalises the
    first and last stage's products. Model.pipeline_stats() reports the
    schedule of the last train_step.

    The optimizer keeps its model open; closing the model closes it first.
    Not collective to create; step() is collective over the tensor group
    (and the data-parallel group).
    """

    def __init__(self, model, *, kind="adamw", lr=1e-3, weight_decay=0.0, betas=(0.9, 0.999),
                 eps=1e-8, momentum=0.0, dampening=0.0, nesterov=False, decay_1d=False,
                 schedule="constant", warmup_steps=0, total_steps=0, max_grad_norm=0.0,
                 grad_accum_steps=1, loss_scaling=None, init_scale=65536.0, growth_factor=2.0,
                 backoff_factor=0.5, growth_interval=2000, zero_stage=0,
                 bucket_bytes=25 << 20, micro_batches=1, pipeline_head_split=0.0):
        from ._model import Model  # not at the top: _model imports this module

        if not isinstance(model, Model):
            raise InvalidArgumentError(f"Optimizer needs an oslo.Model, not "
                                       f"{type(model).__name__}", Status.INVALID_ARGUMENT)
        o = _c.OptimizerOptions()
        o.kind = int(_enum(OptimizerKind, kind, "kind"))
        o.lr = float(lr)
        o.weight_decay = float(weight_decay)
        o.beta1, o.beta2 = (float(b) for b in betas)
        o.eps = float(eps)
        o.momentum = float(momentum)
        o.dampening = float(dampening)
        o.nesterov = 1 if nesterov else 0
        o.decay_1d = 1 if decay_1d else 0
        o.schedule = int(_enum(LRSchedule, schedule, "schedule"))
        o.warmup_steps = int(warmup_steps)
        o.total_steps = int(total_steps)
        o.max_grad_norm = float(max_grad_norm)
        o.loss_scaling = -1 if loss_scaling is None else (1 if loss_scaling else 0)
        o.init_scale = float(init_scale)
        o.growth_factor = float(growth_factor)
        o.backoff_factor = float(backoff_factor)
        o.growth_interval = int(growth_interval)
        t = _c.TrainOptions()
        t.grad_accum_steps = int(grad_accum_steps)
        t.zero_stage = int(zero_stage)
        t.bucket_bytes = int(bucket_bytes)
        t.micro_batches = int(micro_batches)
        t.pipeline_head_split = float(pipeline_head_split)
        super().__init__(_c.Optimizer(model._handle(), o, t), model)
        self._model = model

    @property
    def model(self):
        return self._model

    def step(self):
        """The optimizer step now, from the gradients accumulated so far
        (however many micro-batches), then zeroes them; returns a
        TrainStepResult. Collective over the tensor group."""
        return TrainStepResult._of(self._handle().step())

    def zero_grad(self):
        """Zeroes the model's gradients and restarts the accumulation window."""
        self._handle().zero_grad()

    def save_checkpoint(self, dir, seed=0, epoch=0, data_position=0):
        """Saves a training checkpoint (oslo_checkpoint_save): the model's
        weights (f32 masters), this optimizer's state, step count, schedule
        and loss scale, and the caller's data position, atomically. Loads as
        a model checkpoint too; `oslo.merge` writes its weights. Call after
        an optimizer step. Collective over the world group."""
        seed = int(seed)
        if not 0 <= seed < 2**64:
            raise InvalidArgumentError(f"save_checkpoint: seed {seed} is not a 64-bit unsigned "
                                       "integer", Status.INVALID_ARGUMENT)
        # The binding passes the unsigned seed as its two's-complement int64.
        self._handle().save_checkpoint(os.fspath(dir), seed - 2**64 if seed >= 2**63 else seed,
                                       int(epoch), int(data_position))

    def load_checkpoint(self, dir):
        """Restores a training checkpoint into the model and this optimizer
        (oslo_checkpoint_load; bit-exact resume at the saved tensor-parallel
        size, re-sliced at another) and returns the saved
        {"seed", "epoch", "data_position"}. Collective over the world group."""
        out = _np.zeros(3, _np.int64)
        self._handle().load_checkpoint(os.fspath(dir), out)
        return {"seed": int(out[0]) & 0xFFFFFFFFFFFFFFFF, "epoch": int(out[1]),
                "data_position": int(out[2])}


def merge(src, dst, dtype=None, max_shard_bytes=0, overwrite=False):
    """Merges a parallel checkpoint into one Hugging Face folder."""
    d = -1 if dtype is None else int(_dtype(dtype))
    _c.model_merge(os.fspath(src), os.fspath(dst), d, int(max_shard_bytes), 1 if overwrite else 0)


def reshard(src, dst, tensor_parallel_size):
    """Rewrites a checkpoint or HF folder for another tensor-parallel size."""
    _c.model_reshard(os.fspath(src), os.fspath(dst), int(tensor_parallel_size))


def inspect(path, json=False):
    """Describes a checkpoint: text, or (json=True) the parsed JSON."""
    text = _c.checkpoint_inspect(os.fspath(path), 1 if json else 0)
    if json:
        import json as _json
        return _json.loads(text)
    return text
