"""Rules: Prometheus alerting rule files, the alert state machine, promtool-format tests.

- loader.py      rule files (rulefmt) → RuleGroup / AlertingRule, validated like promtool
- template*.py   the Go text/template subset of labels and annotations (gofmt.py: Go's fmt)
- alerting.py    one rule's inactive → pending → firing → resolved state machine
- manager.py     RuleManager: evaluate groups, restore, reload, rule health
- check.py       `sentinel rules check` (promtool check rules)
- ruletest.py    `sentinel rules test` (promtool test rules)
"""
