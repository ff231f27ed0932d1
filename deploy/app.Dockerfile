# The skillfleet application image from Debian's python3 and wheels installed by build-images.sh.
ARG BASE=skillfleet/debian:bookworm
FROM ${BASE}
COPY site-packages /usr/local/lib/python3.11/dist-packages
COPY bin/ /usr/local/bin/
RUN printf '#!/usr/bin/python3\nfrom skillfleet.cli import main\nmain()\n' >/usr/local/bin/skillfleet \
    && printf '#!/usr/bin/python3\nfrom celery.__main__ import main\nmain()\n' >/usr/local/bin/celery \
    && chmod 0755 /usr/local/bin/skillfleet /usr/local/bin/celery \
    && useradd --system --uid 10001 --home-dir /data skillfleet \
    && install -d -o skillfleet /data /secrets \
    && (python3 -m compileall -q /usr/local/lib/python3.11/dist-packages >/dev/null || true)
ENV PYTHONUNBUFFERED=1 SKILLFLEET_DATA_DIR=/data
USER skillfleet
WORKDIR /data
EXPOSE 8750 5555
ENTRYPOINT ["tini", "--"]
CMD ["skillfleet", "api"]
