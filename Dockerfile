# The skillfleet application image: API, control worker, beat, Flower, node agent and Spark
# worker. Without a registry, deploy/build-images.sh makes an equivalent one.

# skillfleet-launch, which starts node scripts so they die with their worker, needs a C compiler.
FROM python:3.11 AS launcher
COPY workers/runners/launch.c workers/runners/build-launcher.sh /src/
RUN mkdir /out && sh /src/build-launcher.sh /out/skillfleet-launch

FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
# ssh-keygen checks the SSH signatures of skills (docs/signing.md).
RUN apt-get update && apt-get install -y --no-install-recommends openssh-client \
    && rm -rf /var/lib/apt/lists/*
# Dependencies first, at the locked versions and hashes: this layer is rebuilt only when the
# lock changes, not with every change of the code.
COPY requirements.lock ./
RUN pip install --require-hashes -r requirements.lock
COPY pyproject.toml README.md ./
COPY skillfleet ./skillfleet
COPY api ./api
COPY broker ./broker
COPY store ./store
COPY relay ./relay
COPY workers ./workers
COPY migrations ./migrations
COPY --from=launcher /out/ /usr/local/bin/
RUN pip install --no-deps . && useradd --system --uid 10001 skillfleet \
    && mkdir -p /data /secrets && chown skillfleet /data /secrets
USER skillfleet
ENV SKILLFLEET_DATA_DIR=/data
EXPOSE 8750 5555
CMD ["skillfleet", "api"]
