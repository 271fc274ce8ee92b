package client_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/client"
	"github.com/paddockhq/paddock/job"
	"github.com/paddockhq/paddock/results"
)

// writeModeFile writes data as file name (with mode) in a new directory.
func writeModeFile(t *testing.T, name string, data []byte, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, data, mode))
	require.NoError(t, os.Chmod(p, mode))
	return p
}

// inRef is the default ref of data uploaded as base.
func inRef(data []byte, base string) string {
	sum := sha256.Sum256(data)
	return "in/" + hex.EncodeToString(sum[:]) + "/" + base
}

// Small files go inline with their mode, the rest is uploaded and given by
// ref; the inline cap counts what the spec holds already.
func TestAttachFiles(t *testing.T) {
	t.Parallel()
	f := startIOFleet(t, results.StoreQuota{}, "ta")
	c, errs := f.client("ta", "ta")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	script := []byte("#!/bin/sh\necho hi\n")
	small := writeModeFile(t, "run.sh", script, 0o750)
	big := bytes.Repeat([]byte("0123456789abcdef"), job.DefaultInlineBytes/16+1)
	bigPath := writeModeFile(t, "data set.bin", big, 0o640)

	var uploaded []string
	spec := job.Spec{Command: "sh bin/run.sh"}
	err := c.AttachFiles(ctx, &spec, []client.LocalFile{{Name: small, Path: "bin/run.sh"}, {Name: bigPath, Path: "in/data.bin"}},
		client.AttachOptions{Uploaded: func(lf client.LocalFile, obj job.Object) {
			uploaded = append(uploaded, fmt.Sprintf("%s %d %s", lf.Path, obj.Bytes, obj.Name))
		}})
	require.NoError(t, err)
	ref := inRef(big, "data_set.bin")
	assert.Equal(t, []job.File{
		{Path: "bin/run.sh", Mode: "0750", ContentB64: base64.StdEncoding.EncodeToString(script)},
		{Path: "in/data.bin", Mode: "0640", Ref: ref},
	}, spec.Files)
	assert.Equal(t, []string{fmt.Sprintf("in/data.bin %d %s", len(big), ref)}, uploaded)
	obs, err := f.js.ObjectStore(ctx, job.InBucket("ta"))
	require.NoError(t, err)
	got, err := obs.GetBytes(ctx, ref)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(big, got), "uploaded byte-exact")

	// 10 bytes inline already: with a cap of 24, an 18-byte file is uploaded.
	spec = job.Spec{Files: []job.File{{Path: "a", ContentB64: base64.StdEncoding.EncodeToString([]byte("0123456789"))}}}
	require.NoError(t, c.AttachFiles(ctx, &spec, []client.LocalFile{{Name: small, Path: "b"}}, client.AttachOptions{InlineBytes: 24}))
	require.Len(t, spec.Files, 2)
	assert.Equal(t, inRef(script, "run.sh"), spec.Files[1].Ref)
	require.NoError(t, c.AttachFiles(ctx, &spec, []client.LocalFile{{Name: small, Path: "c"}}, client.AttachOptions{InlineBytes: 28}))
	assert.NotEmpty(t, spec.Files[2].ContentB64, "28 bytes hold both")
	assert.Empty(t, errs.list())
}

// AttachFiles stops at the first file it cannot attach with a *FileError
// naming it and what failed; the files before it are in the spec.
func TestAttachFilesErrors(t *testing.T) {
	t.Parallel()
	f := startIOFleet(t, results.StoreQuota{StoredMaxBytes: 1 << 20}, "ta")
	c, _ := f.client("ta", "ta")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	small := writeModeFile(t, "ok.txt", []byte("ok\n"), 0o644)
	huge := writeModeFile(t, "huge.bin", bytes.Repeat([]byte("x"), 2<<20), 0o644)
	for name, tc := range map[string]struct {
		file     client.LocalFile
		op       string
		is       error
		contains string
	}{
		"bad path":    {client.LocalFile{Name: small, Path: "../x"}, "path", nil, "must not contain '..'"},
		"empty path":  {client.LocalFile{Name: small}, "path", nil, "must not be empty"},
		"twice":       {client.LocalFile{Name: small, Path: "a"}, "path", client.ErrDuplicatePath, "given twice"},
		"missing":     {client.LocalFile{Name: "/no/such/file", Path: "m"}, "stat", fs.ErrNotExist, "no such file"},
		"directory":   {client.LocalFile{Name: t.TempDir(), Path: "d"}, "stat", client.ErrNotRegular, "not a regular file"},
		"bucket full": {client.LocalFile{Name: huge, Path: "h"}, "upload", client.ErrBucketFull, "is full"},
	} {
		spec := job.Spec{}
		err := c.AttachFiles(ctx, &spec, []client.LocalFile{{Name: small, Path: "a"}, tc.file}, client.AttachOptions{})
		var fe *client.FileError
		require.ErrorAs(t, err, &fe, name)
		assert.Equal(t, 1, fe.Index, name)
		assert.Equal(t, tc.file, fe.File, name)
		assert.Equal(t, tc.op, fe.Op, name)
		if tc.is != nil {
			assert.ErrorIs(t, err, tc.is, name)
		}
		assert.ErrorContains(t, err, tc.contains, name)
		assert.Len(t, spec.Files, 1, "%s: the file before it is attached", name)
	}
}

// PutFile uploads under the ref given, or by default under
// in/<sha256>/<name> with the name made to fit a ref.
func TestPutFile(t *testing.T) {
	t.Parallel()
	f := startIOFleet(t, results.StoreQuota{}, "ta")
	c, errs := f.client("ta", "ta")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	data := []byte("col1,col2\n1,2\n")
	sum := sha256.Sum256(data)
	hexSum := hex.EncodeToString(sum[:])
	for base, want := range map[string]string{
		"data.csv":                "data.csv",
		"data set (1).csv":        "data_set__1_.csv",
		"..x":                     "._x",
		"...":                     "._.",
		"é.csv":                   "__.csv",
		strings.Repeat("a", 200):  strings.Repeat("a", 180),
		"-dash_and.under-score_1": "-dash_and.under-score_1",
	} {
		obj, err := c.PutFile(ctx, writeModeFile(t, base, data, 0o644), "")
		require.NoError(t, err, base)
		assert.Equal(t, job.Object{Name: "in/" + hexSum + "/" + want, Bytes: int64(len(data)), SHA256: hexSum}, obj, base)
	}
	obj, err := c.PutFile(ctx, writeModeFile(t, "x", data, 0o644), "inputs/d.csv")
	require.NoError(t, err)
	assert.Equal(t, job.Object{Name: "inputs/d.csv", Bytes: int64(len(data)), SHA256: hexSum}, obj)
	_, err = c.PutFile(ctx, "/no/such/file", "")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	_, err = c.PutFile(ctx, writeModeFile(t, "y", data, 0o644), "/abs")
	assert.ErrorIs(t, err, job.ErrInvalid)
	assert.Empty(t, errs.list())
}

// Send a small script inline and a larger data file by reference, both
// from local files: AttachFiles decides which goes how.
func ExampleClient_AttachFiles() {
	fleet := startStandInFleet()
	defer fleet.stop()
	nc, err := nats.Connect(fleet.url)
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.Config{})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()

	dir, err := os.MkdirTemp("", "attach-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	script, data := filepath.Join(dir, "report.py"), filepath.Join(dir, "history.csv")
	_ = os.WriteFile(script, []byte("print('hello')\n"), 0o644)
	_ = os.WriteFile(data, bytes.Repeat([]byte("old,1\n"), 100_000), 0o644) // 600 kB: over the inline cap

	spec := job.Spec{Command: "python3 report.py"}
	err = c.AttachFiles(ctx, &spec, []client.LocalFile{
		{Name: script, Path: "report.py"},
		{Name: data, Path: "in/history.csv"},
	}, client.AttachOptions{Uploaded: func(f client.LocalFile, obj job.Object) {
		fmt.Println("uploaded", filepath.Base(f.Name), obj.Bytes, "bytes")
	}})
	if err != nil {
		panic(err) // a *client.FileError says which file and what failed
	}
	for _, f := range spec.Files {
		fmt.Println(f.Path, "inline:", f.ContentB64 != "", "ref:", strings.HasPrefix(f.Ref, "in/"))
	}
	if _, err := c.Submit(ctx, spec); err != nil {
		panic(err)
	}
	// Output:
	// uploaded history.csv 600000 bytes
	// report.py inline: true ref: false
	// in/history.csv inline: false ref: true
}
