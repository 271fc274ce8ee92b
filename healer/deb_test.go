package healer_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// writeDeb writes a Debian binary package (an ar archive of debian-binary,
// control.tar.gz and data.tar.gz, as dpkg-deb --build makes it) named
// <name>_<version>_all.deb into dir. files maps absolute paths in the
// package to contents; every file is 0755.
func writeDeb(t *testing.T, dir, name, version string, files map[string]string) string {
	t.Helper()
	control := fmt.Sprintf("Package: %s\nVersion: %s\nArchitecture: all\nMaintainer: paddock tests <tests@paddock.invalid>\nDescription: healer test package\n", name, version)
	ctl := tarGz(t, map[string]string{"./control": control}, 0o644)
	data := map[string]string{}
	for p, c := range files {
		data["."+p] = c
	}
	dat := tarGz(t, data, 0o755)

	var ar bytes.Buffer
	ar.WriteString("!<arch>\n")
	member := func(name string, body []byte) {
		fmt.Fprintf(&ar, "%-16s%-12d%-6d%-6d%-8o%-10d`\n", name, time.Now().Unix(), 0, 0, 0o100644, len(body))
		ar.Write(body)
		if len(body)%2 == 1 {
			ar.WriteByte('\n')
		}
	}
	member("debian-binary", []byte("2.0\n"))
	member("control.tar.gz", ctl)
	member("data.tar.gz", dat)
	p := filepath.Join(dir, name+"_"+version+"_all.deb")
	require.NoError(t, os.WriteFile(p, ar.Bytes(), 0o644))
	return p
}

// tarGz builds a gzipped tar of files (with their parent directories).
func tarGz(t *testing.T, files map[string]string, mode int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	dirs := map[string]bool{"./": true}
	var names []string
	for p := range files {
		names = append(names, p)
		for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
			dirs[d+"/"] = true
		}
	}
	var dlist []string
	for d := range dirs {
		dlist = append(dlist, d)
	}
	sort.Strings(dlist)
	sort.Strings(names)
	now := time.Now()
	for _, d := range dlist {
		require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: now}))
	}
	for _, p := range names {
		require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: mode, Size: int64(len(files[p])), ModTime: now}))
		_, err := tw.Write([]byte(files[p]))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, gz.Close())
	return buf.Bytes()
}
