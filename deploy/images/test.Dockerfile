# paddock/test: the 3 MB image the test suite runs its sandboxes in.
#
# Built offline by `scripts/build-images.sh test`, which assembles the build
# context (nothing can be pulled, hence FROM scratch):
#   rootfs/bin/busybox          static busybox (Debian busybox-static)
#   rootfs/bin/<applet>         a symlink to busybox for every applet it lists
#   rootfs/bin/bash             static bash (Debian bash-static)
#   rootfs/etc/passwd, group    root and sandbox (uid/gid 1000, home /tmp)
#   rootfs/tmp                  empty, mode 1777 (Paddock mounts a capped tmpfs here)
#   rootfs/workspace            empty, mode 0777 (a job's volume is mounted here)
# Build by hand: docker build -f deploy/images/test.Dockerfile <context dir>
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /workspace
# Paddock passes --user 1000:1000 itself; this only makes the default safe.
USER 1000:1000
CMD ["/bin/sh"]
