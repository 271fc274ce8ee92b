package job

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ReadBatch reads a batch of specs in JSON Lines: one spec per line, blank
// lines and lines starting with # skipped. Each spec is decoded strictly
// (Decode); every bad line is reported, as name:line: error, before any
// spec is returned. name labels the errors (a file name, "-" for stdin).
func ReadBatch(r io.Reader, name string) ([]Spec, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxSpecBytes+1)
	var specs []Spec
	var errs []error
	line := 1
	for ; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		s, err := Decode([]byte(text))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %w", name, line, err))
			continue
		}
		specs = append(specs, s)
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return nil, fmt.Errorf("%s:%d: %w", name, line, invalid("spec", fmt.Sprintf("the line is over %d bytes; a spec is at most %d", MaxSpecBytes+1, MaxSpecBytes)))
	} else if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("%s: no job specs", name)
	}
	return specs, nil
}
