package initproto

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFrameRoundTrip(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, WriteFrame(&b, TypeStdout, []byte("hello")))
	require.NoError(t, WriteFrame(&b, TypeProbe, nil))
	typ, p, err := ReadFrame(&b, MaxPayload)
	require.NoError(t, err)
	assert.Equal(t, TypeStdout, typ)
	assert.Equal(t, "hello", string(p))
	typ, p, err = ReadFrame(&b, MaxPayload)
	require.NoError(t, err)
	assert.Equal(t, TypeProbe, typ)
	assert.Empty(t, p)
	_, _, err = ReadFrame(&b, MaxPayload)
	assert.ErrorIs(t, err, io.EOF)
}

func TestFrameRejectsOversize(t *testing.T) {
	assert.ErrorIs(t, WriteFrame(io.Discard, TypeStdout, make([]byte, MaxPayload+1)), ErrProtocol)
	_, _, err := ReadFrame(bytes.NewReader([]byte{'O', 0xff, 0xff, 0xff, 0xff}), MaxPayload)
	assert.ErrorIs(t, err, ErrProtocol)
	_, _, err = ReadFrame(bytes.NewReader([]byte{'O', 0, 0, 0, 9, 'a'}), MaxPayload)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
}

func TestTailKeepsLastBytes(t *testing.T) {
	for _, chunks := range [][]string{
		{"abc"}, {"abcdefgh"}, {"abcdefghijkl"}, {"ab", "cd", "ef", "gh", "ij"}, {"abcde", "fghijklmnop", "q"},
	} {
		tail := NewTail(8)
		all := strings.Join(chunks, "")
		for _, c := range chunks {
			_, _ = tail.Write([]byte(c))
		}
		want := all
		if len(want) > 8 {
			want = want[len(want)-8:]
		}
		assert.Equal(t, want, string(tail.Bytes()), "chunks %q", chunks)
		assert.Equal(t, want, string(tail.Take()), "chunks %q: Take", chunks)
	}
	assert.Empty(t, NewTail(0).Bytes())
	assert.Empty(t, NewTail(0).Take())
}

func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{'O', 0, 0, 0, 1, 'x'})
	f.Add([]byte{'X', 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for {
			if _, _, err := ReadFrame(r, MaxReply); err != nil {
				return
			}
		}
	})
}
