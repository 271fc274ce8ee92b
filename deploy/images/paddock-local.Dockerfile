# paddock, offline recipe used by `scripts/build-images.sh paddock`: the same
# image as paddock.Dockerfile without pulling anything. The script builds both
# binaries statically on the host (CGO_ENABLED=0) and assembles the context:
#   rootfs/usr/local/bin/paddock
#   rootfs/usr/local/lib/paddock/paddock-init
#   rootfs/etc/ssl/certs/ca-certificates.crt   host CA bundle (LLM endpoint, OTLP over TLS)
#   rootfs/etc/passwd, group                   root and nonroot (65532), as in distroless
#   rootfs/tmp                                 empty, mode 1777
# See paddock.Dockerfile for the Docker-socket trade-off and how a containerized
# worker shares the init with its sandboxes.
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/paddock"]
