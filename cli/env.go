package cli

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// annotEnvScoped marks a flag whose name means different things on
// different commands (submit --timeout is a job limit, cancel --timeout a
// request timeout): its variable is PADDOCK_<COMMAND>_<FLAG> only, so one
// PADDOCK_TIMEOUT never sets both.
const annotEnvScoped = "paddock_env_scoped"

// scopeEnv marks the flags names of fs as command-scoped (annotEnvScoped).
func scopeEnv(fs *pflag.FlagSet, names ...string) {
	for _, n := range names {
		if err := fs.SetAnnotation(n, annotEnvScoped, []string{"true"}); err != nil {
			panic(err) // a flag name typo: a programming error
		}
	}
}

// annotEnvAlias lists variables other tools already use for a flag
// (NATS_URL, NATS_CREDS: the nats CLI's), read when PADDOCK_<FLAG> is unset.
const annotEnvAlias = "paddock_env_alias"

// setEnvAliases gives flag name of fs the variables aliases.
func setEnvAliases(fs *pflag.FlagSet, name string, aliases ...string) {
	if err := fs.SetAnnotation(name, annotEnvAlias, aliases); err != nil {
		panic(err) // a flag name typo: a programming error
	}
}

// envName is the variable that sets flag f on command cmd: PADDOCK_<FLAG>,
// or PADDOCK_<COMMAND>_<FLAG> for a command-scoped flag.
func envName(cmd *cobra.Command, f *pflag.Flag) string {
	name := f.Name
	if _, scoped := f.Annotations[annotEnvScoped]; scoped {
		name = cmd.Name() + "_" + name
	}
	return "PADDOCK_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// bindEnv sets every flag of cmd not given on the command line from its
// variable (envName). It sets them through the flag set, so a value from
// the environment counts as given (Flags().Changed) exactly like a flag.
func bindEnv(cmd *cobra.Command) error {
	fs := cmd.Flags() // cobra has merged the inherited (persistent) flags in
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "help" {
			return
		}
		name := envName(cmd, f)
		v, ok := os.LookupEnv(name)
		for _, alias := range f.Annotations[annotEnvAlias] {
			if ok {
				break
			}
			name = alias
			v, ok = os.LookupEnv(alias)
		}
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
		}
	})
	return errors.Join(errs...)
}

// secondsValue is a duration flag that also takes a bare number as
// seconds (--timeout 10 = --timeout 10s), the unit it used to have.
type secondsValue time.Duration

// maxS is the largest number of seconds a time.Duration holds.
const maxS = math.MaxInt64 / int64(time.Second)

func newSecondsValue(p *time.Duration, def time.Duration) *secondsValue {
	*p = def
	return (*secondsValue)(p)
}

func (s *secondsValue) Set(v string) error {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n > maxS || n < -maxS {
			return errors.New("out of range")
		}
		*s = secondsValue(time.Duration(n) * time.Second)
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return errors.New("want a duration such as 30s or 2m (a bare number is seconds)")
	}
	*s = secondsValue(d)
	return nil
}

func (s *secondsValue) Type() string { return "duration" }
func (s *secondsValue) String() string {
	if *s == 0 {
		return "0" // pflag leaves a "0" default out of --help
	}
	return time.Duration(*s).String()
}

// wholeSeconds converts d, the value of --flag, to the whole seconds a job
// limit holds.
func wholeSeconds(flag string, d time.Duration) (int64, error) {
	if d%time.Second != 0 {
		return 0, fmt.Errorf("--%s %s: a job limit is whole seconds", flag, d)
	}
	return int64(d / time.Second), nil
}

// choiceValue is a string flag that takes one of a fixed set of values,
// checked when it is set (from the command line or the environment).
type choiceValue struct {
	p       *string
	choices []string
}

func newChoiceValue(p *string, def string, choices ...string) *choiceValue {
	*p = def
	return &choiceValue{p: p, choices: choices}
}

func (c *choiceValue) Set(v string) error {
	for _, ch := range c.choices {
		if v == ch {
			*c.p = v
			return nil
		}
	}
	return fmt.Errorf("want %s", orList(c.choices))
}

func (c *choiceValue) Type() string   { return "string" }
func (c *choiceValue) String() string { return *c.p }

// orList joins "a", "b", "c" as "a, b or c".
func orList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}
