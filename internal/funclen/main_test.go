package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	body := func(n int) string { return strings.Repeat("\t_ = 1\n", n) }
	write := func(name, src string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644))
	}
	// 2 + 8 lines: at the limit of 10, allowed; 11: over.
	write("ok.go", "package p\n\nfunc ok() {\n"+body(8)+"}\n")
	write("long.go", "package p\n\nfunc long() {\n"+body(9)+"}\n\nvar f = func() {\n"+body(9)+"}\n")
	write("long_test.go", "package p\n\nfunc longTest() {\n"+body(50)+"}\n")
	write(".hidden/x.go", "package p\n\nfunc hidden() {\n"+body(50)+"}\n")
	long, err := check(dir, 10)
	require.NoError(t, err)
	require.Len(t, long, 2, "%v", long)
	assert.Contains(t, long[0], "long.go:3: long is 11 lines")
	assert.Contains(t, long[1], "long.go:15: a function literal is 11 lines")
}

func TestRepositoryHasNoLongFunction(t *testing.T) {
	long, err := check("../..", 80)
	require.NoError(t, err)
	assert.Empty(t, long)
}
