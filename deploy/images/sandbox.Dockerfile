# paddock/sandbox, online recipe: for hosts that can pull from a registry.
#
# The offline build (`scripts/build-images.sh sandbox`, mmdebstrap + docker
# import) produces the same content: Debian bookworm, minimal, with bash,
# coreutils, python3, jq, gawk, procps and ca-certificates, a `sandbox` user
# (uid/gid 1000, home /tmp) and an empty /workspace (mode 0777). Keep the two
# package lists in step (SANDBOX_PACKAGES in scripts/build-images.sh).
#
#   docker build -t paddock/sandbox:latest -f deploy/images/sandbox.Dockerfile deploy/images
#
# Paddock runs it with a read-only rootfs, a tmpfs /tmp, no network and
# --user 1000:1000, so nothing here needs to be writable at run time.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}

# Same dpkg filters as the offline build: no man pages, docs (except the
# copyright files) or translations, now and for any later install.
RUN printf '%s\n' \
        'path-exclude=/usr/share/man/*' \
        'path-exclude=/usr/share/doc/*' \
        'path-include=/usr/share/doc/*/copyright' \
        'path-exclude=/usr/share/info/*' \
        'path-exclude=/usr/share/locale/*' \
        'path-exclude=/usr/share/lintian/*' \
        >/etc/dpkg/dpkg.cfg.d/paddock-nodoc \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        bash coreutils python3 jq gawk procps ca-certificates curl \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log \
 && groupadd --gid 1000 sandbox \
 && useradd --uid 1000 --gid 1000 --home-dir /tmp --no-create-home --shell /bin/bash sandbox \
 && install -d -m 0777 /workspace

ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8
WORKDIR /workspace
# Paddock passes --user 1000:1000 itself; this only makes the default safe.
USER 1000:1000
CMD ["/bin/bash"]
