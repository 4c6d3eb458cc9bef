"""The engine: the scheduler and its parts (pyjobq/engine/scheduler.py lists them).

The engine runs in two places. In the scheduler worker (pyjobq/browser/worker_main.py) it
processes the persistent store under the lease; in the page it runs three more times: the
waiting tab's request scheduler, which answers its page's store requests while the worker
waits for the lease (pyjobq/browser/page_main.py); the volatile engine, this tab's
volatile jobs (pyjobq/executor/side.py); and the outbox (pyjobq/outbox/). It never runs
user code and imports nothing of the executor side, the browser adapters or the front
(tests/core/test_layers.py).
"""
