package healer_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/paddockhq/paddock/healer"
	"github.com/paddockhq/paddock/job"
)

func TestCommandWords(t *testing.T) {
	t.Parallel()
	cases := []struct {
		script string
		want   []string
	}{
		{"python x.py", []string{"python"}},
		{"  python3 -c 'print(1)'", []string{"python3"}},
		{"cd /tmp && python x.py | tee log; jq . f", []string{"cd", "python", "tee", "jq"}},
		{"A=1 B=2 python x", []string{"python"}},
		{"env -i FOO=1 python x", []string{"env", "python"}},
		{"sudo -E python x", []string{"sudo", "python"}},
		{"timeout 5s python x", []string{"timeout", "python"}},
		{"find . -name '*.py' | xargs -0 python", []string{"find", "xargs", "python"}},
		{"echo python", []string{"echo"}},
		{"echo 'python; python' \"python\"", []string{"echo"}},
		{"if python x; then pip install y; else echo no; fi", []string{"python", "pip", "echo", "fi"}},
		{"while true; do python x; done", []string{"true", "python", "done"}},
		{"(python x) && { pip y; }", []string{"python", "pip"}},
		{"out=$(python -c 1); echo $out", []string{"echo"}},
		{"echo `python -c 1`", []string{"echo"}},
		{"cat <<EOF\npython\nEOF\npython x", []string{"cat", "python"}},
		{"cat <<-'END'\n\tpython\n\tEND\npip", []string{"cat", "pip"}},
		{"python x 2>&1 >out.txt", []string{"python"}},
		{"> out python x", []string{"python"}},
		{"echo a # python", []string{"echo"}},
		{"case $x in python) echo p;; pip) pip x;; esac", []string{"case", "echo", "pip", "esac"}},
		{"python \\\n  x.py", []string{"python"}},
		{"! python x", []string{"python"}},
		{"'python' x", nil},
		{"pyth\\on x", nil},
		{"$PY x", nil},
		{"", nil},
		{"python\npip", []string{"python", "pip"}},
		{"echo 'unterminated", []string{"echo"}},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, healer.CommandWords(tc.script), "%q", tc.script)
	}
}

func TestDefaultRules(t *testing.T) {
	t.Parallel()
	missing := func(bin string) healer.Failure {
		return healer.Failure{Kind: healer.KindMissingCommand, ExitCode: 127, Reason: job.ReasonExitNonzero, Binary: bin}
	}
	cases := []struct {
		name, cmd string
		f         healer.Failure
		want      string // "" = no rule applies
	}{
		{"python", "python -c 'print(6*7)'", missing("python"), "python3 -c 'print(6*7)'"},
		{"python in a pipeline", "cat x | python script.py && echo python", missing("python"), "cat x | python3 script.py && echo python"},
		{"python twice", "python a.py; python b.py", missing("python"), "python3 a.py; python3 b.py"},
		{"python only as an argument", "echo python", missing("python"), ""},
		{"python3.12", "python3.12 -m venv /tmp/v", missing("python3.12"), "python3 -m venv /tmp/v"},
		{"pip", "pip install --user x", missing("pip"), "pip3 install --user x"},
		{"pip3", "pip3 list", missing("pip3"), "python3 -m pip list"},
		{"fd", "fd -e go", missing("fd"), "fdfind -e go"},
		{"bat", "bat README.md", missing("bat"), "batcat README.md"},
		{"sudo", "sudo apt-get update && sudo -E make install", missing("sudo"), "apt-get update && make install"},
		{"sudo -u refuses", "sudo -u postgres psql", missing("sudo"), ""},
		{"shebang python: nothing to rewrite", "./script.py", missing("python"), ""},
		{"not a missing command", "python x", healer.Failure{Kind: healer.KindFailed, ExitCode: 1}, ""},
		{"unknown binary", "frobnicate", missing("frobnicate"), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			for _, r := range healer.DefaultRules() {
				if fixed, ok := r.Apply(tc.cmd, tc.f); ok {
					got = fixed
					break
				}
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestRenameRuleName(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "node→nodejs", healer.RenameRule("node", "nodejs").Name)
}
