package healer_test

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/paddockhq/paddock/healer"
)

func TestPackagesFor(t *testing.T) {
	t.Parallel()
	l, err := healer.New(healer.Config{Packages: map[string][]string{
		"rg":       {"ripgrep-static"},
		"mytool":   {"acme-tools"},
		"curl":     {},
		"Weird_py": {"Weird_Dist"},
	}})
	require.NoError(t, err)
	cases := map[string][]string{
		"jq":          {"jq", "libjq1", "libonig5"},
		"rg":          {"ripgrep-static"},
		"mytool":      {"acme-tools"},
		"convert":     {"imagemagick"},
		"pip":         {"python3-pip"},
		"hello-tool":  {"hello-tool"}, // unmapped: its own name
		"Weird_py":    {"Weird_Dist"},
		"curl":        nil, // disabled by the operator
		"python":      nil, // a rule's job, never an install
		"/usr/bin/jq": nil,
		"-rf":         nil,
		"a b":         nil,
		"$(id)":       nil,
		"UPPER":       nil, // not a Debian package name
		"":            nil,
	}
	for bin, want := range cases {
		assert.Equal(t, want, l.PackagesFor(bin), bin)
	}
	mapped, err := healer.New(healer.Config{MappedOnly: true})
	require.NoError(t, err)
	assert.Nil(t, mapped.PackagesFor("hello-tool"))
	assert.Equal(t, []string{"ripgrep"}, mapped.PackagesFor("rg"))
}

func TestInstallerTemplate(t *testing.T) {
	t.Parallel()
	l, err := healer.New(healer.Config{
		Installer: "install {{.Package}} for {{.Binary}}: {{.Packages}} | {{range .Packages}}[{{.}}]{{end}} {{.Prefix}} {{.Source}}",
		Prefix:    "/opt/it's", Source: "/src dir",
	})
	require.NoError(t, err)
	got, err := l.RenderInstall("jq", []string{"jq", "libjq1"})
	require.NoError(t, err)
	assert.Equal(t, `install 'jq' for 'jq': 'jq' 'libjq1' | ['jq']['libjq1'] '/opt/it'\''s' '/src dir'`, got)

	def, err := healer.New(healer.Config{})
	require.NoError(t, err)
	script, err := def.RenderInstall("jq", []string{"jq", "libjq1"})
	require.NoError(t, err)
	assert.Contains(t, script, "b='jq' p='/.paddock/root' s='/.paddock/pkgs'")
	assert.Contains(t, script, "for pkg in 'jq' 'libjq1'; do")
	// The default installer is valid for every shell the images have.
	for _, sh := range []string{"sh", "bash", "dash"} {
		if _, err := exec.LookPath(sh); err != nil {
			continue
		}
		out, err := exec.Command(sh, "-n", "-c", script).CombinedOutput()
		assert.NoError(t, err, "%s -n: %s", sh, out)
	}
}

func TestShellQuote(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain", "it's", "a b", `"$(rm -rf /)"`, "`id`", "new\nline", "'''", `\`, "tab\there", "ünï"} {
		out, err := exec.Command("sh", "-c", "printf %s "+healer.ShellQuote(s)).Output()
		require.NoError(t, err)
		assert.Equal(t, s, string(out))
	}
}
