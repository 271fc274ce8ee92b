package healer

// Internals under test (the tests live in package healer_test).

var (
	ParseReply         = parseReply
	ReplaceCommandWord = replaceCommandWord
	NormalizeLine      = normalizeLine
	ShellQuote         = shellQuote
)

// CommandWords returns the command-position words of s.
func CommandWords(s string) []string {
	var out []string
	for _, w := range commandWords(s) {
		out = append(out, s[w.start:w.end])
	}
	return out
}

// PackagesFor is the install table lookup of a Loop.
func (l *Loop) PackagesFor(binary string) []string { return l.inst.packagesFor(binary) }

// RenderInstall renders the Loop's installer for binary.
func (l *Loop) RenderInstall(binary string, pkgs []string) (string, error) {
	return l.inst.render(binary, pkgs)
}
