"""The evaluation harness (`sandgym eval`): a policy on every task of a set,
records on disk.

Episodes run on worker threads, each with one env reset per task
(sandboxes and browsers do the heavy work in their own processes). The
calling thread supervises: workers hand each finished episode to it over
a queue, and it alone writes records (`sandgym.records.RecordWriter`: one
whole-line append per record, fsynced), so an interrupted run keeps what
it finished and never a torn record. A failure inside one episode is
recorded on that episode as `env_error`, never a crash of the run; an
episode that ends in `env_error` is played again after a backoff.

Shutdown. Ctrl-C (SIGINT) stops handing out episodes and lets the running
ones finish; a second Ctrl-C (or SIGTERM) abandons them: their envs are
killed from the supervising thread (`SandgymEnv.abort()`) and each is
recorded as `env_error` with the error "interrupted". Every episode has a
wall-clock deadline (`episode_timeout_s`): past it the episode is
`env_error` and its env is killed the same way.

`--resume` keeps every finished episode and plays the missing ones and
those that ended in `env_error`.

The stages, one module each:

- `eval_run`: `EvalRun`, the entry point: settings checked, the stages run;
- `identity`: what every record of the run carries, and the summary;
- `run_folder`: the `--out` folder made ready, read back by `--resume`,
  its files replaced whole;
- `episode`: one episode's play, its steps and tries recorded;
- `workers`: the worker threads and the queue of episodes they take;
- `supervisor`: the only writer of records; deadlines, Ctrl-C and
  SIGTERM, the records of episodes it ends itself.
"""

from .eval_run import EvalRun, RunInterrupted

__all__ = ["EvalRun", "RunInterrupted"]
