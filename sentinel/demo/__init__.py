"""`sentinel demo`: the loop on one machine, in under a minute.

Simulated vLLM servers, a model simulator, two webhook receivers (a pager and
a chat) and the daemon on its embedded defaults. Four failures side by side:
a crash that a warm restart fixes (told once, to the chat), a crash whose
restart is refused because the XLA cache is cold (one page, with the
runbook), a queue backlog and a stalled engine (paged, recovered, resolved).
The output ends with a table of pages and notifications per scenario,
counted at the receivers.

    sink.py       the loopback webhook receiver
    config.py     the demo's sentinel.yaml
    rules.py      the shipped rules with their clocks sped up
    scenarios.py  what each failure injects and when it is over
    tally.py      pages, updates, resolved notices and notifications per scenario
    run.py        runs it all and prints what happens
"""

from sentinel.demo.run import Demo, run_demo
from sentinel.demo.sink import WebhookSink

__all__ = ["Demo", "WebhookSink", "run_demo"]
