package healer_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/internal/testsvc"
)

// jqDockerfile derives from paddock/sandbox an image without jq whose
// /opt/pkgs holds jq and its two libraries as separate .deb files, as an
// operator would bake a package source into an image. Nothing is pulled.
const jqDockerfile = `FROM paddock/sandbox:latest
USER 0
RUN set -eu; mkdir -p /opt/pkgs; \
    mk() { n=$1; shift; d=/tmp/deb-$n; mkdir -p "$d/DEBIAN"; \
      printf 'Package: %s\nVersion: 1.0\nArchitecture: all\nMaintainer: paddock tests <tests@paddock.invalid>\nDescription: healer test package\n' "$n" >"$d/DEBIAN/control"; \
      for f in "$@"; do mkdir -p "$d$(dirname "$f")"; mv "$f" "$d$f"; done; \
      dpkg-deb --build --root-owner-group "$d" "/opt/pkgs/${n}_1.0_all.deb" >/dev/null; rm -rf "$d"; }; \
    mk jq /usr/bin/jq; \
    mk libjq1 $(find /usr/lib -name 'libjq.so.1*'); \
    mk libonig5 $(find /usr/lib -name 'libonig.so.5*'); \
    ! command -v jq
USER 1000:1000
`

var jqImageMu sync.Mutex

// jqImage builds (once per recipe, kept between runs) the test image of
// jqDockerfile and returns its tag.
func jqImage(t *testing.T, s *setup) string {
	t.Helper()
	testsvc.RequireImage(t, s.docker, "paddock/sandbox:latest")
	sum := sha256.Sum256([]byte(jqDockerfile))
	tag := "paddock/healer-test-jq:" + hex.EncodeToString(sum[:6])
	jqImageMu.Lock()
	defer jqImageMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := s.docker.ImageInspect(ctx, tag); err == nil {
		return tag
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(jqDockerfile))}))
	_, err := tw.Write([]byte(jqDockerfile))
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	res, err := s.docker.ImageBuild(ctx, &buf, client.ImageBuildOptions{
		Tags: []string{tag}, Remove: true, ForceRemove: true, NetworkMode: "none",
		Version: build.BuilderV1, Labels: map[string]string{"io.paddock.test": "healer"},
	})
	require.NoError(t, err, "build %s", tag)
	defer res.Body.Close()
	var log strings.Builder
	dec := json.NewDecoder(res.Body)
	for {
		var msg struct {
			Stream string `json:"stream"`
			Error  string `json:"error"`
		}
		if err := dec.Decode(&msg); err == io.EOF {
			break
		} else {
			require.NoError(t, err)
		}
		log.WriteString(msg.Stream)
		require.Empty(t, msg.Error, "build %s:\n%s", tag, log.String())
	}
	_, err = s.docker.ImageInspect(ctx, tag)
	require.NoError(t, err, "build %s produced no image:\n%s", tag, log.String())
	return tag
}
