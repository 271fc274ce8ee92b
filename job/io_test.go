package job

import (
	"encoding/base64"
	"encoding/json"
	"path"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ioCase is one input of CheckPath, CheckPattern, CheckRef or ParseMode: msg
// is a substring of the error ("" = accepted); schema says that the spec
// schema refuses it too (the rules it can say).
type ioCase struct {
	in     string
	msg    string
	schema bool
}

func pathCases() []ioCase {
	return []ioCase{
		{"a", "", false},
		{"a/b/c.txt", "", false},
		{".hidden", "", false},
		{"..a", "", false},
		{"a..", "", false},
		{"...", "", false},
		{"a..b/c", "", false},
		{".paddockx", "", false},
		{"x/.paddock/y", "", false}, // only the top-level .paddock is reserved
		{"é/ü ñ.txt", "", false},
		{"-rf", "", false},
		{"a\\b", "", false},
		{"*", "", false},
		{strings.Repeat("f", MaxPathElem), "", false},
		{longPath(), "", false},

		{"", "must not be empty", true},
		{strings.Repeat("a", MaxPathBytes+1), "is 1025 bytes; at most 1024 allowed", true},
		{"a/" + strings.Repeat("é", MaxPathBytes/2), "at most 1024 allowed", false}, // bytes, not characters
		{"a\xff", "is not valid UTF-8", false},
		{"\xed\xa0\x80", "is not valid UTF-8", false},
		{"/etc/passwd", `"/etc/passwd" must be relative to the workspace, not absolute`, true},
		{"/", "must be relative", true},
		{"//a", "must be relative", true},
		{"a\nb", `"a\nb" contains a control character (such as a newline)`, true},
		{"a\rb", "control character", true},
		{"a\tb", "control character", true},
		{"a\x00", "control character", true},
		{"a\x7f", "control character", true},
		{"a\u0085b", "control character", true}, // C1 (NEL)
		{"a/", `"a/" has an empty or '.' element; write a clean path`, true},
		{"a//b", "has an empty or '.' element", true},
		{".", "has an empty or '.' element", true},
		{"./a", "has an empty or '.' element", true},
		{"a/./b", "has an empty or '.' element", true},
		{"..", `".." must not contain '..'`, true},
		{"../a", "must not contain '..'", true},
		{"a/..", "must not contain '..'", true},
		{"a/../../etc", "must not contain '..'", true},
		{strings.Repeat("f", MaxPathElem+1), "has an element of 256 bytes; at most 255 allowed", true},
		{"a/" + strings.Repeat("é", 128), "has an element of 256 bytes", false},
		{".paddock", `".paddock" is under .paddock/, which Paddock keeps for itself`, true},
		{".paddock/spill", "is under .paddock/", true},
	}
}

func TestCheckPath(t *testing.T) {
	t.Parallel()
	for _, c := range pathCases() {
		err := CheckPath(c.in)
		if c.msg == "" {
			assert.NoError(t, err, "%q", c.in)
			continue
		}
		if assert.Error(t, err, "%q", c.in) {
			assert.Contains(t, err.Error(), c.msg, "%q", c.in)
		}
	}
	assert.Len(t, longPath(), MaxPathBytes)
}

func patternCases() []ioCase {
	return []ioCase{
		{"out/*.xml", "", false},
		{"*", "", false},
		{"**", "", false},
		{"**/*.log", "", false},
		{"a/**/b", "", false},
		{"**/**", "", false},
		{"a**b", "", false}, // within an element ** is just *
		{"[a-c]?/x", "", false},
		{"[^.]*", "", false},
		{"[!a]", "", false}, // '!' is a plain character to path.Match
		{`\*`, "", false},
		{`[\]]`, "", false},
		{`[\-]`, "", false},
		{"[z-a]", "", false}, // valid syntax, matches nothing
		{"é*", "", false},

		// the rules of CheckPath
		{"/out/*", "must be relative", true},
		{"a/../b", "must not contain '..'", true},
		{"out/", "empty or '.' element", true},
		{".paddock/*", "is under .paddock/", true},
		{"a\n*", "control character", true},
		// path.Match syntax, element by element
		{"out/[a", `"out/[a": element "[a" is not a valid pattern; use *, ?, [abc], [a-z], [^a-z] and \ to escape`, false},
		{"[", `element "[" is not a valid pattern`, false},
		{"x[", "is not a valid pattern", false},
		{"[]", "is not a valid pattern", false},
		{"[]a]", "is not a valid pattern", false},
		{"[^]", "is not a valid pattern", false},
		{"[-a]", "is not a valid pattern", false},
		{"[a-]", "is not a valid pattern", false},
		{"[a-b-c]", "is not a valid pattern", false},
		{`[\]`, "is not a valid pattern", false},
		{`a\`, "is not a valid pattern", false},
		{`ok/a\/b`, `element "a\\" is not a valid pattern`, false}, // no escaping '/'
	}
}

func TestCheckPattern(t *testing.T) {
	t.Parallel()
	for _, c := range patternCases() {
		err := CheckPattern(c.in)
		if c.msg == "" {
			require.NoError(t, err, "%q", c.in)
			for _, e := range strings.Split(c.in, "/") {
				_, err := path.Match(e, "x")
				assert.NoError(t, err, "%q: the collector's path.Match accepts every element", c.in)
			}
			continue
		}
		if assert.Error(t, err, "%q", c.in) {
			assert.Contains(t, err.Error(), c.msg, "%q", c.in)
		}
	}
	for _, c := range pathCases() {
		if c.msg != "" {
			assert.Error(t, CheckPattern(c.in), "a pattern keeps every rule of a path: %q", c.in)
		}
	}
}

func refCases() []ioCase {
	return []ioCase{
		{"a", "", false},
		{"uploads/big.csv", "", false},
		{"A-Z_0.9/x-y", "", false},
		{"a/b/", "", false},
		{".a", "", false},
		{strings.Repeat("r", MaxRefBytes), "", false},

		{strings.Repeat("r", MaxRefBytes+1), "must be 1 to 255 bytes", true},
		{"a b", `"a b": use [A-Za-z0-9._/-]`, true},
		{"é", "use [A-Za-z0-9._/-]", true},
		{"a\x00", "use [A-Za-z0-9._/-]", true},
		{`a\b`, "use [A-Za-z0-9._/-]", true},
		{"a*", "use [A-Za-z0-9._/-]", true},
		{"/a", `"/a" must not start with '/' or contain '..'`, true},
		{"..", "must not start with '/' or contain '..'", true},
		{"a/../b", "contain '..'", true},
		{"a..b", "contain '..'", true},
	}
}

func TestCheckRef(t *testing.T) {
	t.Parallel()
	for _, c := range refCases() {
		err := CheckRef(c.in)
		if c.msg == "" {
			assert.NoError(t, err, "%q", c.in)
			continue
		}
		if assert.Error(t, err, "%q", c.in) {
			assert.Contains(t, err.Error(), c.msg, "%q", c.in)
		}
	}
	assert.ErrorContains(t, CheckRef(""), "must be 1 to 255 bytes", "checkIO never asks: an empty ref means inline")
}

func modeCases() []ioCase {
	return []ioCase{
		{"", "", false},
		{"644", "", false},
		{"0644", "", false},
		{"0400", "", false},
		{"400", "", false},
		{"0600", "", false},
		{"0755", "", false},
		{"0777", "", false},
		{"777", "", false},

		{"0", "is out of range; allowed 0400..0777", true},
		{"0000", "out of range", true},
		{"0200", `"0200" is out of range; allowed 0400..0777 (owner-readable, no setuid, setgid or sticky bit)`, true},
		{"044", "out of range", true},
		{"0377", "out of range", true},
		{"1000", "out of range", true},
		{"1777", "out of range", true},
		{"2755", "out of range", true},
		{"4755", "out of range", true},
		{"7777", "out of range", true},
		{"00644", `"00644" is not an octal mode such as "0644"`, true},
		{"0o644", "is not an octal mode", true},
		{"+644", "is not an octal mode", true},
		{"-644", "is not an octal mode", true},
		{" 644", "is not an octal mode", true},
		{"644\n", "is not an octal mode", true},
		{"0x1ff", "is not an octal mode", true},
		{"0800", "is not an octal mode", true},
		{"rwx", `"rwx" is not an octal mode such as "0644"`, true},
		{"rw-r--r--", "is not an octal mode", true},
		{strings.Repeat("7", 40), "is not an octal mode", true},
	}
}

func TestParseMode(t *testing.T) {
	t.Parallel()
	want := map[string]uint32{"": 0o644, "644": 0o644, "0644": 0o644, "0400": 0o400, "400": 0o400, "0600": 0o600,
		"0755": 0o755, "0777": 0o777, "777": 0o777}
	for _, c := range modeCases() {
		m, err := ParseMode(c.in)
		if c.msg == "" {
			require.NoError(t, err, "%q", c.in)
			assert.Equal(t, want[c.in], m, "%q", c.in)
			continue
		}
		assert.Zero(t, m, "%q", c.in)
		if assert.Error(t, err, "%q", c.in) {
			assert.Contains(t, err.Error(), c.msg, "%q", c.in)
		}
	}
}

// filesDoc returns a spec document with the given file objects.
func filesDoc(files ...string) string {
	return withCmd(`"files":[` + strings.Join(files, ",") + `]`)
}

func b64(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }

// TestCheckIORejects has one row per rule of checkIO, through Decode and
// Validate as the scheduler runs them.
func TestCheckIORejects(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		doc   string
		caps  Caps
		field string
		msg   string
	}{
		// the list of files
		{"too many files", filesDoc(manyFiles(MaxFiles + 1)), fuzzCaps, "files", "101 files; at most 100 allowed (pack more in an archive)"},
		{"files on a ro volume", withCmd(`"volume":{"name":"v","mode":"ro"},"files":[{"path":"a"}]`), fuzzCaps, "files",
			"the workspace is the read-only volume; mount it rw or send no files"},
		{"duplicate path", filesDoc(`{"path":"a"}`, `{"path":"b"}`, `{"path":"a","ref":"r"}`), fuzzCaps, "files[2].path", `"a" is given twice`},
		{"file under a file", filesDoc(`{"path":"a"}`, `{"path":"a/b"}`), fuzzCaps, "files[1].path", `"a/b" is under "a", which is a file of this job too`},
		{"file under a file, deeper first", filesDoc(`{"path":"a/b/c"}`, `{"path":"a"}`), fuzzCaps, "files[0].path", `"a/b/c" is under "a"`},
		{"file under the nearest file", filesDoc(`{"path":"a"}`, `{"path":"a/b"}`, `{"path":"a/b/c"}`), fuzzCaps, "files[2].path", `is under "a/b"`},
		{"inline over the default cap", filesDoc(`{"path":"a","content_b64":"` + b64(DefaultInlineBytes+1) + `"}`), fuzzCaps, "files",
			"inline contents are 131073 bytes; at most 131072 allowed: upload larger files with `paddock put` and give them by ref"},
		{"inline over the cap in all", filesDoc(`{"path":"a","content_b64":"`+b64(6)+`"}`, `{"path":"b","content_b64":"`+b64(5)+`"}`),
			Caps{MaxInlineBytes: 10}, "files", "inline contents are 11 bytes; at most 10 allowed"},

		// one file
		{"path", filesDoc(`{"path":"/etc/passwd"}`), fuzzCaps, "files[0].path", `"/etc/passwd" must be relative to the workspace, not absolute`},
		{"path missing", filesDoc(`{"content_b64":"eA=="}`), fuzzCaps, "files[0].path", "must not be empty"},
		{"second path", filesDoc(`{"path":"a"}`, `{"path":"../b"}`), fuzzCaps, "files[1].path", "must not contain '..'"},
		{"content and ref", filesDoc(`{"path":"a","content_b64":"eA==","ref":"r"}`), fuzzCaps, "files[0]", "give content_b64 or ref, not both"},
		{"base64 no padding", filesDoc(`{"path":"a","content_b64":"eA"}`), fuzzCaps, "files[0].content_b64", "is not standard base64 (RFC 4648, with padding)"},
		{"base64 url alphabet", filesDoc(`{"path":"a","content_b64":"-_8="}`), fuzzCaps, "files[0].content_b64", "is not standard base64"},
		{"base64 space", filesDoc(`{"path":"a","content_b64":"e A="}`), fuzzCaps, "files[0].content_b64", "is not standard base64"},
		{"base64 padding inside", filesDoc(`{"path":"a","content_b64":"eA==eA=="}`), fuzzCaps, "files[0].content_b64", "is not standard base64"},
		{"base64 not base64", filesDoc(`{"path":"a","content_b64":"hello!"}`), fuzzCaps, "files[0].content_b64", "is not standard base64"},
		{"ref alphabet", filesDoc(`{"path":"a","ref":"a b"}`), fuzzCaps, "files[0].ref", `"a b": use [A-Za-z0-9._/-]`},
		{"ref traversal", filesDoc(`{"path":"a","ref":"../x"}`), fuzzCaps, "files[0].ref", `"../x" must not start with '/' or contain '..'`},
		{"ref absolute", filesDoc(`{"path":"a","ref":"/x"}`), fuzzCaps, "files[0].ref", "must not start with '/'"},
		{"ref long", filesDoc(`{"path":"a","ref":"` + strings.Repeat("r", MaxRefBytes+1) + `"}`), fuzzCaps, "files[0].ref", "must be 1 to 255 bytes"},
		{"mode setuid", filesDoc(`{"path":"a","mode":"4755"}`), fuzzCaps, "files[0].mode", `"4755" is out of range; allowed 0400..0777`},
		{"mode not octal", filesDoc(`{"path":"a","mode":"rwx"}`), fuzzCaps, "files[0].mode", `"rwx" is not an octal mode such as "0644"`},
		{"mode of a ref", filesDoc(`{"path":"a","ref":"r","mode":"0200"}`), fuzzCaps, "files[0].mode", "out of range"},

		// stdin, artifacts, output
		{"stdin over", withCmd(`"stdin":"` + strings.Repeat("i", MaxStdinBytes+1) + `"`), fuzzCaps, "stdin",
			"is 65537 bytes; at most 65536 allowed (send larger input as a file)"},
		{"stdin multibyte over", withCmd(`"stdin":"` + strings.Repeat("é", MaxStdinBytes/2+1) + `"`), fuzzCaps, "stdin", "at most 65536 allowed"},
		{"too many patterns", withCmd(`"artifacts":[` + manyPatterns(MaxArtifactPatterns+1) + `]`), fuzzCaps, "artifacts", "33 patterns; at most 32 allowed"},
		{"pattern absolute", withCmd(`"artifacts":["ok/*","/out"]`), fuzzCaps, "artifacts[1]", `"/out" must be relative to the workspace, not absolute`},
		{"pattern syntax", withCmd(`"artifacts":["out/[a"]`), fuzzCaps, "artifacts[0]", `"out/[a": element "[a" is not a valid pattern`},
		{"keep where nothing is kept", withCmd(`"output":{"keep":true}`), Caps{NoKeep: true}, "output.keep",
			"this fleet does not keep full output (the operator turned it off)"},
		{"spill without a volume", withCmd(`"output":{"spill":true}`), fuzzCaps, "output.spill",
			"spilled output goes into the workspace: mount a volume rw"},
		{"spill on a ro volume", withCmd(`"volume":{"name":"v","mode":"ro"},"output":{"spill":true}`), fuzzCaps, "output.spill",
			"spilled output goes into the workspace: mount a volume rw"},
		{"spill type", withCmd(`"output":{"spill":"yes"}`), fuzzCaps, "output.spill", "expected true or false, got a string"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := decodeAndValidate(tc.doc, tc.caps)
			require.ErrorIs(t, err, ErrInvalid)
			assertFieldError(t, FieldErrors(err), tc.field, tc.msg)
		})
	}
}

func TestCheckIOAccepts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		doc  string
		caps Caps
	}{
		{"inline at the cap", filesDoc(`{"path":"a","content_b64":"`+b64(6)+`"}`, `{"path":"b","content_b64":"`+b64(4)+`"}`), Caps{MaxInlineBytes: 10}},
		{"refs do not count as inline", filesDoc(`{"path":"a","content_b64":"`+b64(10)+`"}`, `{"path":"b","ref":"up/b"}`), Caps{MaxInlineBytes: 10}},
		{"empty file", filesDoc(`{"path":"a"}`, `{"path":"b","content_b64":""}`), Caps{}},
		{"base64 line breaks are ignored", filesDoc(`{"path":"a","content_b64":"ZWNo\nbyBo\r\naQo="}`), Caps{}},
		{"siblings and prefixes", filesDoc(`{"path":"a/b"}`, `{"path":"a/c"}`, `{"path":"ab"}`, `{"path":"a.b/c"}`), Caps{}},
		{"a ro volume without files", withCmd(`"volume":{"name":"v","mode":"ro"},"artifacts":["*"]`), fuzzCaps},
		{"files on a rw volume", withCmd(`"volume":{"name":"v"},"files":[{"path":"a"}]`), fuzzCaps},
		{"keep false where nothing is kept", withCmd(`"output":{"keep":false}`), Caps{NoKeep: true}},
		{"spill on a rw volume", withCmd(`"volume":{"name":"v"},"output":{"spill":true}`), fuzzCaps},
		{"spill on an explicit rw volume with keep", withCmd(`"volume":{"name":"v","mode":"rw"},"output":{"spill":true,"keep":true}`), fuzzCaps},
		{"spill false without a volume", withCmd(`"output":{"spill":false}`), Caps{}},
		{"stdin at the cap", withCmd(`"stdin":"` + strings.Repeat("i", MaxStdinBytes) + `"`), Caps{}},
		{"duplicate patterns", withCmd(`"artifacts":["*","*"]`), Caps{}},
	} {
		_, err := decodeAndValidate(tc.doc, tc.caps)
		assert.NoError(t, err, tc.name)
	}
	// The base64 of DefaultInlineBytes fits in a spec.
	assert.Less(t, base64.StdEncoding.EncodedLen(DefaultInlineBytes), MaxSpecBytes)
}

// Specs built in Go never pass through Decode; json.Marshal would turn
// invalid UTF-8 into U+FFFD, so Validate refuses it.
func TestCheckIOGoBuiltSpecs(t *testing.T) {
	t.Parallel()
	bad := string([]byte{0xff, 0xfe})
	cases := []struct {
		name  string
		spec  Spec
		field string
		msg   string
	}{
		{"stdin invalid UTF-8", Spec{Command: "x", Stdin: "a" + bad}, "stdin", "is not valid UTF-8"},
		{"stdin NUL", Spec{Command: "x", Stdin: "a\x00"}, "stdin", "contains a NUL byte"},
		{"path invalid UTF-8", Spec{Command: "x", Files: []File{{Path: bad}}}, "files[0].path", "is not valid UTF-8"},
		{"path NUL", Spec{Command: "x", Files: []File{{Path: "a\x00"}}}, "files[0].path", "control character"},
		{"ref invalid UTF-8", Spec{Command: "x", Files: []File{{Path: "a", Ref: bad}}}, "files[0].ref", "use [A-Za-z0-9._/-]"},
		{"mode NUL", Spec{Command: "x", Files: []File{{Path: "a", Mode: "0644\x00"}}}, "files[0].mode", "not an octal mode"},
		{"content NUL", Spec{Command: "x", Files: []File{{Path: "a", ContentB64: "eA==\x00"}}}, "files[0].content_b64", "not standard base64"},
		{"pattern invalid UTF-8", Spec{Command: "x", Artifacts: []string{"*" + bad}}, "artifacts[0]", "is not valid UTF-8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec := tc.spec
			_, err := Validate(&spec, fuzzCaps)
			require.ErrorIs(t, err, ErrInvalid)
			assertFieldError(t, FieldErrors(err), tc.field, tc.msg)
		})
	}
}

// Every problem of the files is reported, in order.
func TestCheckIOReportsEveryField(t *testing.T) {
	t.Parallel()
	_, err := decodeAndValidate(withCmd(`"volume":{"name":"v","mode":"ro"},
		"files":[{"path":"/a","mode":"x","content_b64":"!"},{"path":"b","ref":"r","content_b64":"eA=="},{"path":"b"},{"path":"b/c","ref":"/r"}],
		"stdin":"`+strings.Repeat("i", MaxStdinBytes+1)+`","artifacts":["[","ok"],"output":{"keep":true,"spill":true}`), Caps{Volumes: true, NoKeep: true})
	var fields []string
	for _, fe := range FieldErrors(err) {
		fields = append(fields, fe.Field)
	}
	assert.Equal(t, []string{"files", "files[0].path", "files[0].mode", "files[0].content_b64", "files[1]",
		"files[2].path", "files[3].ref", "files[3].path", "stdin", "artifacts[0]", "output.spill", "output.keep"}, fields)
}

func TestKeepOutput(t *testing.T) {
	t.Parallel()
	yes, no := true, false
	cases := []struct {
		name   string
		output *OutputPolicy
		caps   Caps
		want   bool
		valid  bool
	}{
		{"default off", nil, Caps{}, false, true},
		{"operator default on", nil, Caps{KeepOutput: true}, true, true},
		{"empty policy takes the default", &OutputPolicy{}, Caps{KeepOutput: true}, true, true},
		{"job asks", &OutputPolicy{Keep: &yes}, Caps{}, true, true},
		{"job declines", &OutputPolicy{Keep: &no}, Caps{KeepOutput: true}, false, true},
		{"fleet off", nil, Caps{NoKeep: true}, false, true},
		{"fleet off wins over its default", nil, Caps{KeepOutput: true, NoKeep: true}, false, true},
		{"fleet off, job declines", &OutputPolicy{Keep: &no}, Caps{NoKeep: true}, false, true},
		{"fleet off, job asks", &OutputPolicy{Keep: &yes}, Caps{NoKeep: true}, false, false},
	}
	for _, tc := range cases {
		s := Spec{Command: "x", Output: tc.output}
		assert.Equal(t, tc.want, KeepOutput(&s, tc.caps), tc.name)
		eff, err := Validate(&s, tc.caps)
		if !tc.valid {
			assertFieldError(t, FieldErrors(err), "output.keep", "does not keep full output")
			continue
		}
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.want, eff.KeepOutput, "%s: Effective.KeepOutput", tc.name)
	}
}

var bucketName = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`) // nats.go jetstream: valid bucket names

func TestIONames(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "paddock.output.dev.build-42.test", OutputSubject("dev", "build-42.test"))
	assert.Equal(t, "paddock.output.default.a~", OutputSubject("", "a."), "ids are written as in result subjects")
	assert.Equal(t, "paddock.output.dev.%2A", OutputSubject("dev", "*"))
	assert.Equal(t, "paddock.output.dev.>", OutputSubjects("dev"))
	assert.Equal(t, "PADDOCK_OUTPUT_dev", OutputStream("dev"))
	assert.Equal(t, "paddock_out_dev", OutBucket("dev"))
	assert.Equal(t, "paddock_in_dev", InBucket("dev"))
	assert.Equal(t, "paddock_out_default", OutBucket(""))
	assert.Equal(t, "build-42/stdout", StdoutObject("build-42", 1))
	assert.Equal(t, "build-42/stderr", StderrObject("build-42", 1))
	assert.Equal(t, "build-42/artifacts/out/r.xml", ArtifactObject("build-42", 1, "out/r.xml"))
	assert.Equal(t, "build-42/run2/stdout", StdoutObject("build-42", 2), "a later run writes its own objects")
	assert.Equal(t, "build-42/run3/stderr", StderrObject("build-42", 3))
	assert.Equal(t, "build-42/run2/artifacts/out/r.xml", ArtifactObject("build-42", 2, "out/r.xml"))
	assert.Equal(t, "build-42/stdout", StdoutObject("build-42", 0), "a job not run names run 1's")
	for _, id := range []string{"a", "build-42.test", ".", "a..b", "*", ">", "a b"} {
		assert.True(t, validPublishSubject(OutputSubject("t", id)), id)
		assert.True(t, strings.HasPrefix(OutputSubject("t", id), strings.TrimSuffix(OutputSubjects("t"), ">")), id)
	}
	for _, tenant := range []string{"a", "dev", "team-7", strings.Repeat("a", 32)} {
		require.NoError(t, CheckTenant(tenant))
		assert.Regexp(t, bucketName, OutBucket(tenant))
		assert.Regexp(t, bucketName, InBucket(tenant))
	}
	assert.Equal(t, []string{"Paddock-Stream", "Paddock-Seq", "Paddock-Run", "Paddock-Skipped", "Paddock-End"},
		[]string{HeaderOutStream, HeaderOutSeq, HeaderOutRun, HeaderOutSkipped, HeaderOutEnd})
}

func TestIOJSON(t *testing.T) {
	t.Parallel()
	yes := true
	s := Spec{Command: "x", Files: []File{{Path: "a", ContentB64: "eA==", Mode: "0755"}, {Path: "b", Ref: "up/b"}},
		Stdin: "in", Output: &OutputPolicy{Keep: &yes}, Artifacts: []string{"*.xml"}}
	b, err := json.Marshal(s)
	require.NoError(t, err)
	assert.JSONEq(t, `{"command":"x","files":[{"path":"a","content_b64":"eA==","mode":"0755"},{"path":"b","ref":"up/b"}],
		"stdin":"in","output":{"keep":true},"artifacts":["*.xml"]}`, string(b))
	back, err := Decode(b)
	require.NoError(t, err)
	assert.Equal(t, s, back)

	b, err = json.Marshal(Spec{Command: "x", Output: &OutputPolicy{}})
	require.NoError(t, err)
	assert.JSONEq(t, `{"command":"x","output":{}}`, string(b), "keep absent: the operator's default")
}

// TestDocSessionExamples keeps the sessions part of docs/job-contract.md
// what the code does: its spec validates and passes the schema, its result
// passes the schema, decodes strictly and names the spill files as
// SpillPath does, and every error it quotes for the session fields is the
// one Validate writes.
func TestDocSessionExamples(t *testing.T) {
	t.Parallel()
	doc, ex := docExamples(t)
	require.Len(t, ex["session-spec"], 1)
	require.Len(t, ex["session-result"], 1)

	s, err := Decode([]byte(ex["session-spec"][0]))
	require.NoError(t, err)
	eff, err := Validate(&s, Caps{Volumes: true})
	require.NoError(t, err)
	require.NotNil(t, s.Volume)
	require.NotNil(t, s.Output)
	assert.True(t, s.Output.Spill)
	assert.Positive(t, s.Volume.MaxBytes)
	assert.Empty(t, validateSchema(loadSchema(t, SpecSchema), []byte(ex["session-spec"][0])))

	block := ex["session-result"][0]
	assert.Empty(t, validateSchema(loadSchema(t, ResultSchema), []byte(block)))
	var r Result
	dec := json.NewDecoder(strings.NewReader(block))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&r))
	assert.Equal(t, s.ID, r.ID)
	assert.Equal(t, r.Reason.State(), r.State)
	assert.Equal(t, &eff, r.Limits, "example result limits = Validate(example spec)")
	require.NotNil(t, r.Spilled)
	for _, st := range []struct {
		name  string
		out   Output
		spill SpillFile
	}{{"stdout", r.Stdout, r.Spilled.Stdout}, {"stderr", r.Stderr, r.Spilled.Stderr}} {
		assert.Equal(t, SpillPath(r.ID, st.name), st.spill.Path)
		if st.spill.Error == "" {
			assert.Equal(t, st.out.Bytes, st.spill.Bytes, "%s: a spill without an error holds the whole stream", st.name)
		}
		if st.out.Truncated {
			assert.EqualValues(t, st.out.Bytes, int64(len(st.out.Text)+len(st.out.Tail))+st.out.OmittedBytes, st.name)
			assert.LessOrEqual(t, int64(len(st.out.Text)+len(st.out.Tail)), eff.OutputBytes, st.name)
		}
	}
	assert.GreaterOrEqual(t, r.VolumeBytes, r.Spilled.Stdout.Bytes+r.Spilled.Stderr.Bytes, "the spill files are in the volume")
	assert.LessOrEqual(t, r.VolumeBytes, s.Volume.MaxBytes, "a job that ended ok stayed within its quota")

	const deleteJob = `{"command":"true","volume":{"name":"sess-a","delete":true}}`
	assert.Contains(t, doc, "`"+deleteJob+"`")
	_, err = decodeAndValidate(deleteJob, Caps{Volumes: true})
	assert.NoError(t, err)

	for _, d := range []string{
		withCmd(`"volume":{"name":"v","max_bytes":-1}`),
		withCmd(`"volume":{"name":"v","mode":"ro","delete":true}`),
		withCmd(`"output":{"spill":true}`),
	} {
		_, err := decodeAndValidate(d, fuzzCaps)
		fes := FieldErrors(err)
		require.Len(t, fes, 1, d)
		assert.Contains(t, doc, "`"+fes[0].Error()+"`", "docs/job-contract.md shows this error as the code writes it")
	}
}
