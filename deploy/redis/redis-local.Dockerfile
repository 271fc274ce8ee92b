# paddock/redis: Redis for asynq and Paddock's results, offline recipe used by
# `scripts/build-images.sh redis` (no registry: nothing is pulled). FROM
# scratch with the host's Debian binaries and exactly the shared libraries
# they link (as ldd resolves them), so the image needs no distribution
# (context: rootfs.tar, numeric owners kept):
#   rootfs/usr/bin/redis-server     Debian redis-server (7.0 in bookworm);
#                                   redis-check-aof and redis-check-rdb are
#                                   the same binary under other names
#   rootfs/usr/bin/redis-cli        Debian redis-tools (health checks)
#   rootfs/lib/x86_64-linux-gnu/…   their libraries; rootfs/lib64/ld-linux…
#   rootfs/etc/passwd, group        root and redis (999, as the official image,
#                                   so a /data volume moves between the two)
#   rootfs/data                     empty, owned by 999
# Rebuilt when a package owning one of those files changes version (the
# recipe label hashes their versions): `apt-get upgrade` then
# `scripts/build-images.sh redis` picks up Debian's security fixes.
# With a registry: REDIS_IMAGE=redis:7 in docker-compose.yml does the same job.
FROM scratch
# A tar, not a directory: ADD keeps its owners (COPY would make /data root's).
ADD rootfs.tar /
ENV PATH=/usr/bin
USER 999:999
WORKDIR /data
EXPOSE 6379
VOLUME ["/data"]
CMD ["redis-server", "--appendonly", "yes", "--appendfsync", "everysec", "--maxmemory-policy", "noeviction", "--dir", "/data"]
