"""Episodes on a Ray cluster: `sandgym eval --executor ray` and the
trainers' rollout pool (`sandgym.rollouts`).

Each node with CPUs runs one runner actor (`runner.NodeRunner`) holding
the node's own runtime and a few seats, each a thread that keeps its env
(its browser, its zygote, its warm pool) between episodes, as a worker
thread of a local run does. Runners are detached and stay warm after the
run (for `--ray-idle` seconds): the next run claims them rather than
starting its own (`runner.py` says what a claimed runner keeps and what
it does not). The process that started the run (the eval, or
the trainer) takes a free seat per episode, plays the episode there, and
gets the record back (`fleet.Fleet`): it stays the only writer of records.
A node lost mid-episode costs that try, kept in the record's `retries`,
and the episode is played again on a seat of another node.

An eval that finds warm runners written down for its `--ray-address`
reaches them over their own RPC (`wire.py`, `runner_rpc.py`, `direct.py`)
and never imports Ray; the first eval on a cluster goes through Ray.

Ray is imported here and only here (and by `sandgym.rollouts`), never by
`import sandgym` nor by a local run. Install it with `pip install
'sandgym[ray]'`.
"""
