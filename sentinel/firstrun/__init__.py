"""`sentinel init`: a first config from what the vLLM servers say about themselves.

    look.py      ask each server (version, metric set, model) and the Docker sockets
                 (which container serves it, its image: the accelerator)
    render.py    the commented YAML for what was found (pure: findings in, text out)
    examples.py  the examples, systemd unit and dashboards the package carries
"""
