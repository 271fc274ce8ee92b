package job_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/job"
)

func TestReadBatch(t *testing.T) {
	t.Parallel()
	in := "# a comment\n\n{\"command\":\"echo 1\"}\n  {\"command\":\"echo 2\",\"queue\":\"high\"}  \n"
	specs, err := job.ReadBatch(strings.NewReader(in), "jobs.jsonl")
	require.NoError(t, err)
	require.Len(t, specs, 2)
	assert.Equal(t, "echo 1", specs[0].Command)
	assert.Equal(t, "high", specs[1].Queue)
}

func TestReadBatchReportsEveryBadLine(t *testing.T) {
	t.Parallel()
	in := "{\"command\":\"echo 1\"}\n{\"comand\":\"typo\"}\nnot json\n"
	_, err := job.ReadBatch(strings.NewReader(in), "jobs.jsonl")
	require.Error(t, err)
	assert.ErrorIs(t, err, job.ErrInvalid)
	assert.Contains(t, err.Error(), "jobs.jsonl:2:")
	assert.Contains(t, err.Error(), "jobs.jsonl:3:")
	assert.NotContains(t, err.Error(), "jobs.jsonl:1:")
	var ve *job.ValidationError
	assert.True(t, errors.As(err, &ve), "typed: %v", err)
}

func TestReadBatchEmptyAndHuge(t *testing.T) {
	t.Parallel()
	_, err := job.ReadBatch(strings.NewReader("# only comments\n\n"), "-")
	assert.EqualError(t, err, "-: no job specs")

	huge := `{"command":"` + strings.Repeat("x", job.MaxSpecBytes+10) + `"}`
	_, err = job.ReadBatch(strings.NewReader("{\"command\":\"echo ok\"}\n"+huge+"\n"), "big.jsonl")
	require.Error(t, err)
	assert.ErrorIs(t, err, job.ErrInvalid)
	assert.Contains(t, err.Error(), "big.jsonl:2:")
	assert.Contains(t, err.Error(), "is over")
}
