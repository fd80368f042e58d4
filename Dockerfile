# One kudu_async node (master or tablet server): the container's command is kudu-node's flags, and every
# flag can also come from the environment as KUDU_<FLAG> (compose.yaml sets them that way).
#   docker build -t kudu-async .
#   docker run --rm kudu-async --help
FROM python:3.11-slim

WORKDIR /opt/kudu_async
COPY pyproject.toml README.md ./
COPY kudu_async ./kudu_async
RUN pip install --no-cache-dir . \
    && useradd --system --uid 10001 --home-dir /var/lib/kudu kudu \
    && mkdir -p /var/lib/kudu \
    && chown kudu:kudu /var/lib/kudu

# A node listens on every interface of its container and names itself by --rpc-advertised-addresses
# (default: the container's host name, which a compose network resolves).
ENV KUDU_DATA_DIR=/var/lib/kudu
USER kudu
VOLUME /var/lib/kudu
# Kudu's ports: master RPC and admin HTTP, tablet server RPC and admin HTTP.
EXPOSE 7051 8051 7050 8050
ENTRYPOINT ["kudu-node"]
