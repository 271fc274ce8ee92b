package healer

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"regexp"
	"runtime"
	"strings"
	"text/template"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/paddockhq/paddock/job"
)

// The default installer's paths inside the container.
const (
	// DefaultPrefix is where the default installer unpacks packages. It
	// must be a writable, exec-allowed mount owned by the sandbox user
	// (the sandbox's /tmp and /workspace are noexec), and its bin
	// directories must be on the sandbox's PATH: see docs/healing.md.
	DefaultPrefix = "/.paddock/root"
	// DefaultSource is the directory the default installer reads .deb
	// files and Python wheels from: a read-only mount the operator
	// provides, or a directory baked into the image.
	DefaultSource = "/.paddock/pkgs"
)

// DefaultInstaller is the installer template: a user-space install that
// works in the sandbox as it is (read-only root, uid 1000, no
// capabilities, no network). For each package it unpacks
// <Source>/<pkg>_*.deb (or <pkg>.deb) into Prefix with dpkg-deb -x
// (Debian's or busybox's), else installs <pkg> with
// `pip install --user --no-index --find-links <Source>` into
// <Prefix>/usr when the image has pip. It succeeds when the missing
// binary is then on PATH. Package scripts (postinst) never run, so only
// files count: a binary whose libraries are neither in the image nor
// unpacked alongside it (the package table lists such libraries) fails
// on the retry.
//
// Template fields, each rendered already shell-quoted (never wrap them in
// quotes yourself): .Binary, .Package (the first package), .Packages
// (all, space-separated; {{range .Packages}} gives each), .Prefix, .Source.
const DefaultInstaller = `b={{.Binary}} p={{.Prefix}} s={{.Source}}
mkdir -p "$p" || exit 1
for pkg in {{.Packages}}; do
  deb=
  for f in "$s/$pkg"_*.deb "$s/$pkg.deb"; do if [ -f "$f" ]; then deb=$f; break; fi; done
  if [ -n "$deb" ]; then
    echo "paddock-install: $pkg: dpkg-deb -x $deb $p" >&2
    dpkg-deb -x "$deb" "$p" || echo "paddock-install: $pkg: unpack failed" >&2
  elif python3 -m pip --version >/dev/null 2>&1; then
    echo "paddock-install: $pkg: pip install --user from $s" >&2
    PYTHONUSERBASE="$p/usr" python3 -m pip install -q --user --no-index --find-links "$s" "$pkg" >&2 || echo "paddock-install: $pkg: pip failed" >&2
  else
    echo "paddock-install: $pkg: no $pkg.deb, ${pkg}_*.deb or wheel in $s" >&2
  fi
done
command -v "$b" >/dev/null 2>&1 && exit 0
echo "paddock-install: $b is still not on PATH ($PATH)" >&2
exit 1
`

// defaultPackages maps binaries to the Debian packages that provide them
// where the names differ, or where a self-contained install needs
// libraries the base image lacks. Any other binary whose name is a valid
// Debian package name is looked up under its own name (unless
// Config.MappedOnly). python is deliberately absent: `python` → `python3`
// is a rule repair, not an install.
var defaultPackages = map[string][]string{
	"jq":         {"jq", "libjq1", "libonig5"},
	"rg":         {"ripgrep"},
	"fdfind":     {"fd-find"},
	"batcat":     {"bat"},
	"ag":         {"silversearcher-ag"},
	"convert":    {"imagemagick"},
	"identify":   {"imagemagick"},
	"mogrify":    {"imagemagick"},
	"magick":     {"imagemagick"},
	"pip":        {"python3-pip"},
	"pip3":       {"python3-pip"},
	"awk":        {"gawk"},
	"dig":        {"bind9-dnsutils"},
	"nslookup":   {"bind9-dnsutils"},
	"ps":         {"procps"},
	"top":        {"procps"},
	"free":       {"procps"},
	"watch":      {"procps"},
	"ip":         {"iproute2"},
	"ping":       {"iputils-ping"},
	"xmllint":    {"libxml2-utils"},
	"pdftotext":  {"poppler-utils"},
	"sponge":     {"moreutils"},
	"column":     {"bsdextrautils"},
	"hexdump":    {"bsdextrautils"},
	"7z":         {"p7zip-full"},
	"xz":         {"xz-utils"},
	"unxz":       {"xz-utils"},
	"diff":       {"diffutils"},
	"cmp":        {"diffutils"},
	"envsubst":   {"gettext-base"},
	"node":       {"nodejs"},
	"g++":        {"g++"},
	"cc":         {"gcc"},
	"yamllint":   {"yamllint"},
	"shellcheck": {"shellcheck"},
	"sqlite3":    {"sqlite3"},
	"xxd":        {"xxd"},
	"file":       {"file", "libmagic1", "libmagic-mgc"},
	"tree":       {"tree"},
	"bc":         {"bc"},
	"zip":        {"zip"},
	"unzip":      {"unzip"},
	"curl":       {"curl"},
	"wget":       {"wget"},
	"git":        {"git"},
	"make":       {"make"},
	"rsync":      {"rsync"},
	"ffmpeg":     {"ffmpeg"},
	"zstd":       {"zstd"},
}

// noInstall are names never installed: rules repair them (python), or no
// package can make them work in a sandbox (package managers, privilege
// and service tools).
var noInstall = []string{
	"python", "python2", "sudo", "su", "doas", "apt", "apt-get", "aptitude", "dpkg",
	"yum", "dnf", "apk", "brew", "snap", "systemctl", "service", "docker", "podman",
}

// DefaultPackages returns a copy of the built-in binary → packages table.
func DefaultPackages() map[string][]string {
	out := make(map[string][]string, len(defaultPackages))
	for k, v := range defaultPackages {
		out[k] = append([]string(nil), v...)
	}
	return out
}

var (
	// binaryName is what may be looked up for an install: a plain command
	// name, never a path, an option or anything with shell syntax.
	binaryName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$`)
	// packageName accepts Debian package names and Python distribution
	// names (which may have capitals and underscores).
	packageName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$`)
	// debianName is the Debian policy's package-name syntax: an unmapped
	// binary is looked up under its own name only if it fits.
	debianName = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]{1,127}$`)
)

// shellWord renders as one POSIX-shell-quoted word in a template.
type shellWord string

func (w shellWord) String() string { return shellQuote(string(w)) }

// shellWords renders as quoted words separated by spaces.
type shellWords []shellWord

func (ws shellWords) String() string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = w.String()
	}
	return strings.Join(parts, " ")
}

// shellQuote quotes s for sh, bash, dash and busybox: single quotes, with
// each embedded ' written as '\”.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

type installData struct {
	Binary   shellWord
	Package  shellWord
	Packages shellWords
	Prefix   shellWord
	Source   shellWord
}

// installer is the install link of the repair chain: for a missing
// command it renders the installer template for the binary's packages and
// runs it in the job's container, then the same command again.
type installer struct {
	tmpl       *template.Template
	packages   map[string][]string
	disabled   map[string]bool
	mappedOnly bool
	prefix     string
	source     string

	timeout            time.Duration     // Config.InstallTimeout
	runEnv, installEnv map[string]string // Config.RunEnv, Config.InstallEnv
	tracer             trace.Tracer
	metrics            Metrics
}

// newInstaller returns the installer of cfg (already with defaults).
func newInstaller(cfg Config) (*installer, error) {
	tmpl, err := template.New("installer").Option("missingkey=error").Parse(cfg.Installer)
	if err != nil {
		return nil, fmt.Errorf("%w: installer template: %v", ErrConfig, err)
	}
	pk, disabled := DefaultPackages(), map[string]bool{}
	for _, n := range noInstall {
		disabled[n] = true
	}
	for bin, pkgs := range cfg.Packages {
		if !binaryName.MatchString(bin) {
			return nil, fmt.Errorf("%w: package map key %q is not a plain command name", ErrConfig, bin)
		}
		for _, p := range pkgs {
			if !packageName.MatchString(p) {
				return nil, fmt.Errorf("%w: package %q (for %s) is not a valid package name", ErrConfig, p, bin)
			}
		}
		if len(pkgs) == 0 {
			delete(pk, bin) // an empty list: never install for this name
			disabled[bin] = true
			continue
		}
		pk[bin] = append([]string(nil), pkgs...)
		delete(disabled, bin) // the operator maps it: install it
	}
	in := &installer{tmpl: tmpl, packages: pk, disabled: disabled, mappedOnly: cfg.MappedOnly,
		prefix: cfg.Prefix, source: cfg.Source, timeout: cfg.InstallTimeout,
		runEnv: cfg.RunEnv, installEnv: cfg.InstallEnv, tracer: cfg.Tracer, metrics: cfg.Metrics}
	if _, err := in.render("jq", []string{"jq", "libjq1"}); err != nil {
		return nil, fmt.Errorf("%w: installer template: %v", ErrConfig, err)
	}
	return in, nil
}

// packagesFor returns the packages to install for binary, or nil when
// there is nothing to install (a path, an odd name, an unmapped name in
// MappedOnly mode).
func (in *installer) packagesFor(binary string) []string {
	if !binaryName.MatchString(binary) {
		return nil
	}
	if p, ok := in.packages[binary]; ok {
		return p
	}
	if in.disabled[binary] || in.mappedOnly || !debianName.MatchString(binary) {
		return nil
	}
	return []string{binary}
}

// render fills the template for binary and its packages.
func (in *installer) render(binary string, pkgs []string) (string, error) {
	d := installData{Binary: shellWord(binary), Prefix: shellWord(in.prefix), Source: shellWord(in.source)}
	for _, p := range pkgs {
		d.Packages = append(d.Packages, shellWord(p))
	}
	if len(pkgs) > 0 {
		d.Package = shellWord(pkgs[0])
	}
	var b bytes.Buffer
	if err := in.tmpl.Execute(&b, d); err != nil {
		return "", err
	}
	return b.String(), nil
}

// defaultRunEnv is the environment of every command after an install:
// the unpacked libraries and the user-site Python packages become
// visible. LD_LIBRARY_PATH is reserved to Paddock (a job may not set it),
// and it only names directories inside the job's own container.
func defaultRunEnv(prefix string) map[string]string {
	var dirs []string
	if t := multiarch[runtime.GOARCH]; t != "" {
		dirs = append(dirs, prefix+"/usr/lib/"+t, prefix+"/lib/"+t)
	}
	dirs = append(dirs, prefix+"/usr/lib", prefix+"/lib")
	return map[string]string{
		"LD_LIBRARY_PATH": strings.Join(dirs, ":"),
		"PYTHONUSERBASE":  prefix + "/usr",
	}
}

// multiarch is Debian's library directory triplet per Go architecture
// (the containers run on the worker's own architecture).
var multiarch = map[string]string{
	"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu", "386": "i386-linux-gnu",
	"arm": "arm-linux-gnueabihf", "ppc64le": "powerpc64le-linux-gnu", "s390x": "s390x-linux-gnu",
	"riscv64": "riscv64-linux-gnu", "mips64le": "mips64el-linux-gnuabi64",
}

func mergeEnv(layers ...map[string]string) map[string]string {
	var out map[string]string
	for _, l := range layers {
		if len(l) == 0 {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(l))
		}
		maps.Copy(out, l)
	}
	return out
}

// repair installs the packages of a missing command, when the job allows
// installs and the command was not named by its path.
func (in *installer) repair(ctx context.Context, r *run, c *repairCase) (bool, error) {
	if c.f.Kind != KindMissingCommand || !r.allowInstall || c.f.ExplicitPath {
		return false, nil
	}
	pkgs := in.packagesFor(c.f.Binary)
	if len(pkgs) == 0 {
		return false, nil
	}
	c.action = job.ActionInstall
	script, desc, ok, err := in.run(ctx, r, c.f.Binary, pkgs)
	if err != nil {
		return false, err
	}
	c.next.install = script
	if !ok {
		c.noFix(desc)
		return false, nil
	}
	c.settle(Fix{Source: job.ActionInstall, Binary: c.f.Binary, Packages: pkgs}, desc+"; same command again")
	return true, nil
}

// run runs the installer for binary in r's container. ok reports that the
// installer succeeded (the binary is now on PATH); what describes the run
// for the notes; err is the Executor's.
func (in *installer) run(ctx context.Context, r *run, binary string, pkgs []string) (script, what string, ok bool, err error) {
	list := strings.Join(pkgs, ", ")
	script, err = in.render(binary, pkgs)
	if err != nil { // the template was checked at New: only odd data gets here
		return "", "install of " + list + ": " + err.Error(), false, nil
	}
	timeout, ok := r.budget(in.timeout)
	if !ok {
		return "", "no time left before the job deadline to install " + list, false, nil
	}
	ctx, span := in.tracer.Start(ctx, "paddock.install", trace.WithAttributes(
		attribute.String(job.AttrHealBinary, binary),
		attribute.StringSlice(job.AttrHealPackages, pkgs),
		attribute.Int64(job.AttrCommandTimeoutMS, timeout.Milliseconds()),
	))
	defer span.End()
	r.installed = true // even a failed install may have unpacked something
	out, err := r.ex.Exec(ctx, Command{Script: script, Timeout: timeout, Env: mergeEnv(in.runEnv, in.installEnv), Install: true})
	span.SetAttributes(attribute.Int("process.exit.code", out.ExitCode), attribute.String(job.AttrReason, string(out.Reason)))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return script, "", false, fmt.Errorf("healer: install %s: %w", list, err)
	}
	took := out.Duration.Round(time.Millisecond)
	if out.Reason != job.ReasonOK {
		in.metrics.emit(ctx, EventInstallFailure, 1)
		span.SetStatus(codes.Error, "installer failed")
		r.log.InfoContext(ctx, "install failed", "binary", binary, "packages", pkgs, "exit", out.ExitCode, "reason", out.Reason, "stderr", tail(out.Stderr, 512))
		why := Failure{Kind: KindFailed, ExitCode: out.ExitCode, Reason: out.Reason, Line: lastLine(out.Stderr)}
		if out.Reason != job.ReasonExitNonzero {
			why.Kind = KindResourceKill
		}
		return script, fmt.Sprintf("install of %s failed (%s)", list, why), false, nil
	}
	in.metrics.emit(ctx, EventInstall, 1)
	r.log.InfoContext(ctx, "installed", "binary", binary, "packages", pkgs, "took", took)
	return script, fmt.Sprintf("installed %s in %s", list, took), true, nil
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := stderrLines(s)
	if len(lines) == 0 {
		return ""
	}
	return lines[len(lines)-1]
}
