# paddock/nats: NATS server with JetStream, offline recipe used by
# `scripts/build-images.sh nats` (no registry: nothing is pulled). The script
# assembles the context (rootfs.tar, numeric owners kept):
#   rootfs/nats-server          static (CGO_ENABLED=0) build of the Go module
#                               github.com/nats-io/nats-server/v2 at the
#                               version the script pins (the one Paddock embeds)
#   rootfs/etc/nats/nats.conf   deploy/nats/nats.conf, which includes
#                               auth/nats-auth.conf (operator mode): mount
#                               the output of `paddock auth init` at
#                               /etc/nats/auth, or the server refuses to
#                               start ("error parsing include file")
#   rootfs/etc/passwd, group    root and nats (65532)
#   rootfs/data                 empty JetStream store, owned by 65532: an empty
#                               named volume mounted here inherits the owner
#   rootfs/tmp                  empty, mode 1777
# With a registry, the official image does the same job: NATS_IMAGE=nats:2.12
# in docker-compose.yml (it runs as root: a store written by it is not
# writable by this image's uid 65532 until chowned).
FROM scratch
# A tar, not a directory: ADD keeps its owners (COPY would make /data root's).
ADD rootfs.tar /
ENV NATS_SYNC_INTERVAL=always \
    NATS_MAX_FILE_STORE=10GB \
    NATS_SERVER_NAME=paddock-nats
USER 65532:65532
EXPOSE 4222 8222
VOLUME ["/data"]
ENTRYPOINT ["/nats-server"]
CMD ["--config", "/etc/nats/nats.conf"]
