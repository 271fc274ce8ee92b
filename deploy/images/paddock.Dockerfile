# paddock: the one binary (scheduler, worker, CLI) plus the sandbox init.
# Online recipe, for hosts that can pull from a registry. Context: repo root.
#
#   docker build -t paddock/paddock:latest -f deploy/images/paddock.Dockerfile .
#
# Offline hosts use paddock-local.Dockerfile via `scripts/build-images.sh paddock`
# (same layout, binaries built on the host, FROM scratch).
#
# Layout (both recipes):
#   /usr/local/bin/paddock                  entrypoint
#   /usr/local/lib/paddock/paddock-init     static init that Paddock bind-mounts
#                                           read-only into every sandbox as PID 1
#
# Trade-off, the Docker socket: a worker drives the engine through
# /var/run/docker.sock, and whoever holds that socket is root on the host. The
# image runs as the distroless "nonroot" user (65532) so that schedulers and the
# CLI, which need no socket, run unprivileged; a worker must be given the socket
# explicitly and the socket's group:
#   docker run -v /var/run/docker.sock:/var/run/docker.sock \
#     --group-add "$(stat -c %g /var/run/docker.sock)" paddock/paddock worker
# Running the worker as root (--user 0) works too but gains nothing: the socket
# is already the whole host. Limit the blast radius instead: dedicated worker
# hosts, or a socket proxy that allows only the container endpoints Paddock uses.
#
# The sandbox init: bind-mount sources are resolved by the engine on the HOST,
# so a worker running in a container cannot mount the init from its own image
# filesystem. Share it through a named volume (an empty named volume mounted at
# /usr/local/lib/paddock is filled from the image on first use; version the
# volume name so an upgrade does not keep a stale init) or a host path.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/paddock ./cmd/paddock \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/paddock-init ./cmd/paddock-init

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/paddock /usr/local/bin/paddock
COPY --from=build /out/paddock-init /usr/local/lib/paddock/paddock-init
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/paddock"]
