"""The collectives every torch.distributed job of gpart makes, preparation and runtime alike.

Every collective is bounded in time (a peer that failed, left or was killed
gives a one-line RankMismatchError instead of a hang), every rank makes the
same sequence of calls, and everything works in a world of one (no
torch.distributed). gloo takes CPU tensors, NCCL CUDA tensors: tensors move to
the backend's device for the exchange and come back on the device they came
from. Nothing is pickled.

- `process_group`: who am I (`world`, `comm_device`), the bounded `wait`, `barrier`;
- `waiting`, `presence`: how a gloo wait goes (in slices: a peer that has ended fails it at once, one
  known to be stuck, or a wait past half its limit, gets one warning line; a late one, silence), and the records in the job's store that say where each rank is
  (its last named collective, whether it has ended); `peers`: which host a failed one lost;
- `all_to_all`: `group_by_owner`, `exchange_counts`, `all_to_all_rows`, `all_to_all_variable`;
- `agreement`: `check_same_across_ranks`, `agree_or_raise` (the runtime's checks);
- `comm`: `Comm`, the preparation commands' handle (bytes and numpy arrays:
  all_reduce, all_gather_bytes, broadcasts, `agree`, the shuffle's
  `exchange_rows`), and `init_from_env` that joins torchrun's job.
"""

from gpart.base.errors import RankMismatchError
from gpart.collectives.agreement import agree_or_raise, check_same_across_ranks
from gpart.collectives.all_to_all import all_to_all_rows, all_to_all_variable, exchange_counts, group_by_owner
from gpart.collectives.comm import Comm, ShuffleAborted, init_from_env
from gpart.collectives.process_group import barrier, comm_device, is_initialized, wait, world

__all__ = [
    # the error every collective raises when ranks disagree or one does not answer in time
    "RankMismatchError",
    "world",
    "is_initialized",
    "comm_device",
    "wait",
    "barrier",
    "group_by_owner",
    "exchange_counts",
    "all_to_all_rows",
    "all_to_all_variable",
    "check_same_across_ranks",
    "agree_or_raise",
    "Comm",
    "ShuffleAborted",
    "init_from_env",
]
