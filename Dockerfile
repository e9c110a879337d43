# Sentinel as a container: `docker build -t sentinel . && docker run -v $PWD/sentinel.yaml:/etc/sentinel/sentinel.yaml sentinel`
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    SENTINEL_HOME=/app

WORKDIR /app
COPY pyproject.toml README.md ./
COPY sentinel ./sentinel
COPY migrations ./migrations
COPY rules ./rules
RUN pip install --no-cache-dir '.[postgres,kubernetes]' \
    && useradd --system --uid 10001 --home-dir /var/lib/sentinel --create-home sentinel \
    && mkdir -p /etc/sentinel && cp -r /app/rules /etc/sentinel/rules

USER sentinel
WORKDIR /var/lib/sentinel
EXPOSE 9465
HEALTHCHECK --interval=30s --timeout=3s CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:9465/healthz', timeout=2)" || exit 1
ENTRYPOINT ["sentinel"]
CMD ["run", "-c", "/etc/sentinel/sentinel.yaml"]
