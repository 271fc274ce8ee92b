package job

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fuzzCaps enable every optional feature so that fixed rules, not the
// operator's switches, decide; the built-in defaults (docs/job-contract.md) apply otherwise.
var fuzzCaps = Caps{AllowInstall: true, Volumes: true}

func decodeAndValidate(doc string, caps Caps) (Effective, error) {
	s, err := Decode([]byte(doc))
	if err != nil {
		return Effective{}, err
	}
	return Validate(&s, caps)
}

// withCmd returns a spec document with command "true" and extra members.
func withCmd(members string) string {
	if members == "" {
		return `{"command":"true"}`
	}
	return `{"command":"true",` + members + `}`
}

func manyEnv(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"V%d":"x"`, i)
	}
	return `"env":{` + strings.Join(parts, ",") + `}`
}

// manyFiles returns n file objects f0..f(n-1) of one inline byte each.
func manyFiles(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`{"path":"f%d","content_b64":"eA=="}`, i)
	}
	return strings.Join(parts, ",")
}

// longPath is a valid path of MaxPathBytes with an element of MaxPathElem.
func longPath() string {
	p := strings.Repeat("d/", (MaxPathBytes-MaxPathElem)/2) + strings.Repeat("f", MaxPathElem)
	return strings.Repeat("d", MaxPathBytes-len(p)) + p
}

// manyPatterns returns n artifact patterns.
func manyPatterns(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"out%d/*"`, i)
	}
	return strings.Join(parts, ",")
}

func manyLabels(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"l%d":"x"`, i)
	}
	return `"labels":{` + strings.Join(parts, ",") + `}`
}

// TestValidateRejects has one row per rule: the spec, the caps, the field the
// error must name and a substring of its message (the allowed range).
func TestValidateRejects(t *testing.T) {
	t.Parallel()
	lowCaps := Caps{MaxMemoryMB: 1024, MaxCPUs: 1, MaxPids: 100, MaxOutputBytes: 4096, MaxTmpfsMB: 128,
		MaxCommandTimeout: time.Minute, MaxJobTimeout: 10 * time.Minute, MaxAttempts: 2}
	cases := []struct {
		name  string
		doc   string
		caps  Caps
		field string
		msg   string
	}{
		// version
		{"v 2", withCmd(`"v":2`), fuzzCaps, "v", "unsupported version 2; this server speaks version 1"},
		{"v negative", withCmd(`"v":-1`), fuzzCaps, "v", "unsupported version -1"},

		// id
		{"id space", withCmd(`"id":"a b"`), fuzzCaps, "id", "[A-Za-z0-9._-]{1,128}"},
		{"id slash", withCmd(`"id":"a/b"`), fuzzCaps, "id", "[A-Za-z0-9._-]{1,128}"},
		{"id star", withCmd(`"id":"a*"`), fuzzCaps, "id", "[A-Za-z0-9._-]{1,128}"},
		{"id non-ascii", withCmd(`"id":"é"`), fuzzCaps, "id", "[A-Za-z0-9._-]{1,128}"},
		{"id 129", withCmd(`"id":"` + strings.Repeat("a", 129) + `"`), fuzzCaps, "id", "{1,128}"},
		{"id NUL", withCmd(`"id":"a\u0000"`), fuzzCaps, "id", "NUL"},

		// grants
		{"grants 17", withCmd(`"grants":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]`), fuzzCaps, "grants", "17 grants; at most 16 allowed"},
		{"grant upper", withCmd(`"grants":["GitHub"]`), fuzzCaps, "grants[0]", "must be a DNS label"},
		{"grant digit first", withCmd(`"grants":["1x"]`), fuzzCaps, "grants[0]", "must be a DNS label"},
		{"grant dash last", withCmd(`"grants":["gh-"]`), fuzzCaps, "grants[0]", "must be a DNS label"},
		{"grant dot", withCmd(`"grants":["gh.evil"]`), fuzzCaps, "grants[0]", "must be a DNS label"},
		{"grant 64", withCmd(`"grants":["` + strings.Repeat("a", 64) + `"]`), fuzzCaps, "grants[0]", "must be a DNS label"},
		{"grant twice", withCmd(`"grants":["gh","x","gh"]`), fuzzCaps, "grants[2]", `"gh" is named twice`},
		{"grant empty", withCmd(`"grants":[""]`), fuzzCaps, "grants[0]", "must be a DNS label"},

		// command
		{"command missing", `{}`, fuzzCaps, "command", "must not be empty; allowed 1..65536 bytes"},
		{"command empty", `{"command":""}`, fuzzCaps, "command", "must not be empty; allowed 1..65536 bytes"},
		{"command blank", `{"command":" \n\t\r"}`, fuzzCaps, "command", "must not be blank; allowed 1..65536 bytes"},
		{"command 64KiB+1", `{"command":"` + strings.Repeat("x", MaxCommandBytes+1) + `"}`, fuzzCaps, "command", "is 65537 bytes; at most 65536 allowed"},
		{"command multibyte over", `{"command":"` + strings.Repeat("é", MaxCommandBytes/2+1) + `"}`, fuzzCaps, "command", "at most 65536 allowed"},
		{"command escaped NUL", `{"command":"echo \u0000"}`, fuzzCaps, "command", `NUL`},
		{"command lone surrogate", `{"command":"echo \ud800"}`, fuzzCaps, "command", "lone UTF-16 surrogate"},
		{"command not string", `{"command":["sh","-c"]}`, fuzzCaps, "command", "expected a string, got an array"},

		// image
		{"image not allowed", withCmd(`"image":"evil:latest"`), fuzzCaps, "image", `"evil:latest" is not allowed; allowed images: paddock/sandbox:latest`},
		{"image operator list", withCmd(`"image":"paddock/sandbox:latest"`), Caps{Images: []string{"a:1", "b:2"}}, "image", "allowed images: a:1, b:2"},
		{"image case", withCmd(`"image":"PADDOCK/sandbox:latest"`), fuzzCaps, "image", "is not allowed"},

		// env
		{"env too many", withCmd(manyEnv(MaxEnvVars + 1)), fuzzCaps, "env", "65 variables; at most 64 allowed"},
		{"env name digit", withCmd(`"env":{"1A":"x"}`), fuzzCaps, "env", "must match [A-Za-z_][A-Za-z0-9_]{0,127}"},
		{"env name dash", withCmd(`"env":{"A-B":"x"}`), fuzzCaps, "env", `name "A-B" must match`},
		{"env name empty", withCmd(`"env":{"":"x"}`), fuzzCaps, "env", "must match"},
		{"env name =", withCmd(`"env":{"A=B":"x"}`), fuzzCaps, "env", "must match"},
		{"env name 129", withCmd(`"env":{"` + strings.Repeat("A", 129) + `":"x"}`), fuzzCaps, "env", "{0,127}"},
		{"env PATH", withCmd(`"env":{"PATH":"/evil"}`), fuzzCaps, "env.PATH", "reserved"},
		{"env HOME", withCmd(`"env":{"HOME":"/"}`), fuzzCaps, "env.HOME", "reserved"},
		{"env BASH_ENV", withCmd(`"env":{"BASH_ENV":"/x"}`), fuzzCaps, "env.BASH_ENV", "reserved"},
		{"env LD_PRELOAD", withCmd(`"env":{"LD_PRELOAD":"/x.so"}`), fuzzCaps, "env.LD_PRELOAD", "reserved"},
		{"env LD_ prefix", withCmd(`"env":{"LD_BIND_NOW":"1"}`), fuzzCaps, "env.LD_BIND_NOW", "reserved"},
		{"env PADDOCK_", withCmd(`"env":{"PADDOCK_FENCING_TOKEN":"9"}`), fuzzCaps, "env.PADDOCK_FENCING_TOKEN", "reserved"},
		{"env BASH_FUNC_", withCmd(`"env":{"BASH_FUNC_ls":"() { :; }"}`), fuzzCaps, "env.BASH_FUNC_ls", "reserved"},
		{"env GLIBC_TUNABLES", withCmd(`"env":{"GLIBC_TUNABLES":"x"}`), fuzzCaps, "env.GLIBC_TUNABLES", "reserved"},
		{"env TRACEPARENT", withCmd(`"env":{"TRACEPARENT":"00-x"}`), fuzzCaps, "env.TRACEPARENT", "reserved"},
		{"env allowlist", withCmd(`"env":{"SECRET":"x"}`), Caps{EnvAllow: []string{"CI", "APP_*"}}, "env.SECRET", "allowlist: CI, APP_*"},
		{"env value 4KiB+1", withCmd(`"env":{"A":"` + strings.Repeat("x", MaxEnvValue+1) + `"}`), fuzzCaps, "env.A", "is 4097 bytes; at most 4096 allowed"},
		{"env value NUL", withCmd(`"env":{"A":"x\u0000y"}`), fuzzCaps, "env.A", "NUL"},
		{"env key NUL", withCmd(`"env":{"A\u0000":"x"}`), fuzzCaps, `env."A\x00"`, "NUL"},
		{"env value type", withCmd(`"env":{"A":1}`), fuzzCaps, "env.A", "expected a string, got a number"},
		{"env not object", withCmd(`"env":["A=1"]`), fuzzCaps, "env", "expected an object, got an array"},

		// workdir
		{"workdir relative", withCmd(`"workdir":"src"`), fuzzCaps, "workdir", "must be an absolute path of at most 256 bytes"},
		{"workdir long", withCmd(`"workdir":"/` + strings.Repeat("a", MaxWorkdir) + `"`), fuzzCaps, "workdir", "is 257 bytes; at most 256 allowed"},
		{"workdir dotdot", withCmd(`"workdir":"/a/../etc"`), fuzzCaps, "workdir", "must not contain '..'"},
		{"workdir trailing dotdot", withCmd(`"workdir":"/a/.."`), fuzzCaps, "workdir", "'..'"},
		{"workdir NUL", withCmd(`"workdir":"/a\u0000"`), fuzzCaps, "workdir", "NUL"},

		// queue
		{"queue unknown", withCmd(`"queue":"vip"`), fuzzCaps, "queue", `"vip" is not a configured queue; queues: default`},
		{"queue operator list", withCmd(`"queue":"default"`), Caps{Queues: []string{"fast", "slow"}}, "queue", "queues: fast, slow"},

		// labels
		{"labels too many", withCmd(manyLabels(MaxLabels + 1)), fuzzCaps, "labels", "33 labels; at most 32 allowed"},
		{"label key dash first", withCmd(`"labels":{"-a":"x"}`), fuzzCaps, "labels", "must be 1-63 of [A-Za-z0-9._/-], starting and ending alphanumeric"},
		{"label key empty", withCmd(`"labels":{"":"x"}`), fuzzCaps, "labels", "1-63"},
		{"label key 64", withCmd(`"labels":{"` + strings.Repeat("k", 64) + `":"x"}`), fuzzCaps, "labels", "1-63"},
		{"label value 257", withCmd(`"labels":{"k":"` + strings.Repeat("v", MaxLabelValue+1) + `"}`), fuzzCaps, "labels.k", "is 257 bytes; at most 256 allowed"},
		{"label value NUL", withCmd(`"labels":{"k":"\u0000"}`), fuzzCaps, "labels.k", "NUL"},

		// heal
		{"heal mode", withCmd(`"heal":{"mode":"always"}`), fuzzCaps, "heal.mode", `"always" is not one of off, rules, llm`},
		{"heal mode case", withCmd(`"heal":{"mode":"LLM"}`), fuzzCaps, "heal.mode", "off, rules, llm"},
		{"heal attempts above", withCmd(`"heal":{"max_attempts":4}`), fuzzCaps, "heal.max_attempts", "4 is out of range; allowed 1..3 (0 = default)"},
		{"heal attempts negative", withCmd(`"heal":{"max_attempts":-1}`), fuzzCaps, "heal.max_attempts", "allowed 1..3"},
		{"heal attempts caps", withCmd(`"heal":{"max_attempts":3}`), lowCaps, "heal.max_attempts", "allowed 1..2"},
		{"heal install off", withCmd(`"heal":{"allow_install":true}`), Caps{}, "heal.allow_install", "installs are disabled by the operator"},
		{"heal install type", withCmd(`"heal":{"allow_install":"yes"}`), fuzzCaps, "heal.allow_install", "expected true or false, got a string"},
		{"heal not object", withCmd(`"heal":"llm"`), fuzzCaps, "heal", "expected an object, got a string"},

		// volume
		{"volume disabled", withCmd(`"volume":{"name":"cache"}`), Caps{}, "volume", "shared volumes are not enabled"},
		{"volume name missing", withCmd(`"volume":{}`), fuzzCaps, "volume.name", "must be 1-64 of [A-Za-z0-9._-], starting alphanumeric, without '..'"},
		{"volume name traversal", withCmd(`"volume":{"name":"../etc"}`), fuzzCaps, "volume.name", "1-64"},
		{"volume name dotdot", withCmd(`"volume":{"name":"a..b"}`), fuzzCaps, "volume.name", "without '..'"},
		{"volume name slash", withCmd(`"volume":{"name":"a/b"}`), fuzzCaps, "volume.name", "1-64"},
		{"volume name 65", withCmd(`"volume":{"name":"` + strings.Repeat("v", 65) + `"}`), fuzzCaps, "volume.name", "1-64"},
		{"volume mode", withCmd(`"volume":{"name":"v","mode":"wx"}`), fuzzCaps, "volume.mode", `"wx" is not rw or ro`},
		{"volume max_bytes negative", withCmd(`"volume":{"name":"v","max_bytes":-1}`), fuzzCaps, "volume.max_bytes", "-1 is out of range; allowed 0..1099511627776 bytes (0 = no bound)"},
		{"volume max_bytes over 1 TiB", withCmd(`"volume":{"name":"v","max_bytes":1099511627777}`), fuzzCaps, "volume.max_bytes", "1099511627777 is out of range; allowed 0..1099511627776 bytes"},
		{"volume max_bytes on ro", withCmd(`"volume":{"name":"v","mode":"ro","max_bytes":1}`), fuzzCaps, "volume.max_bytes", "a quota needs a rw volume (a ro job cannot grow it)"},
		{"volume delete on ro", withCmd(`"volume":{"name":"v","mode":"ro","delete":true}`), fuzzCaps, "volume.delete", "deleting the volume needs it mounted rw"},
		{"volume max_bytes fraction", withCmd(`"volume":{"name":"v","max_bytes":1.5}`), fuzzCaps, "volume.max_bytes", "1.5 is not an integer"},
		{"volume delete type", withCmd(`"volume":{"name":"v","delete":"yes"}`), fuzzCaps, "volume.delete", "expected true or false, got a string"},

		// limits: ≤ 0, below the floor, above the default caps, above operator caps
		{"memory 0", withCmd(`"limits":{"memory_mb":0}`), fuzzCaps, "limits.memory_mb", "0 is out of range; allowed 6..2048 MiB"},
		{"memory negative", withCmd(`"limits":{"memory_mb":-512}`), fuzzCaps, "limits.memory_mb", "allowed 6..2048 MiB"},
		{"memory below floor", withCmd(`"limits":{"memory_mb":5}`), fuzzCaps, "limits.memory_mb", "5 is out of range; allowed 6..2048 MiB"},
		{"memory above cap", withCmd(`"limits":{"memory_mb":2049}`), fuzzCaps, "limits.memory_mb", "allowed 6..2048 MiB"},
		{"memory above operator cap", withCmd(`"limits":{"memory_mb":2048}`), lowCaps, "limits.memory_mb", "allowed 6..1024 MiB"},
		{"memory type", withCmd(`"limits":{"memory_mb":"1g"}`), fuzzCaps, "limits.memory_mb", "expected an integer, got a string"},
		{"memory fraction", withCmd(`"limits":{"memory_mb":1.5}`), fuzzCaps, "limits.memory_mb", "not an integer"},
		{"memory overflow", withCmd(`"limits":{"memory_mb":9223372036854775808}`), fuzzCaps, "limits.memory_mb", "does not fit in a 64-bit integer"},
		{"cpus 0", withCmd(`"limits":{"cpus":0}`), fuzzCaps, "limits.cpus", "0 is out of range; allowed 0.01..2"},
		{"cpus negative", withCmd(`"limits":{"cpus":-1}`), fuzzCaps, "limits.cpus", "allowed 0.01..2"},
		{"cpus below floor", withCmd(`"limits":{"cpus":0.001}`), fuzzCaps, "limits.cpus", "allowed 0.01..2"},
		{"cpus above cap", withCmd(`"limits":{"cpus":2.5}`), fuzzCaps, "limits.cpus", "2.5 is out of range; allowed 0.01..2"},
		{"cpus above operator cap", withCmd(`"limits":{"cpus":1.5}`), lowCaps, "limits.cpus", "allowed 0.01..1"},
		{"cpus huge", withCmd(`"limits":{"cpus":1e400}`), fuzzCaps, "limits.cpus", "out of range"},
		{"pids 0", withCmd(`"limits":{"pids":0}`), fuzzCaps, "limits.pids", "0 is out of range; allowed 20..512"},
		{"pids below floor", withCmd(`"limits":{"pids":8}`), fuzzCaps, "limits.pids", "8 is below the floor of 20 (the sandbox's init and a shell need 20 processes); allowed 20..512"},
		{"pids above cap", withCmd(`"limits":{"pids":513}`), fuzzCaps, "limits.pids", "allowed 20..512"},
		{"pids above operator cap", withCmd(`"limits":{"pids":101}`), lowCaps, "limits.pids", "allowed 20..100"},
		{"command timeout 0", withCmd(`"limits":{"command_timeout_s":0}`), fuzzCaps, "limits.command_timeout_s", "0 is out of range; allowed 1..300 s"},
		{"command timeout above cap", withCmd(`"limits":{"command_timeout_s":301}`), fuzzCaps, "limits.command_timeout_s", "allowed 1..300 s"},
		{"command timeout above operator cap", withCmd(`"limits":{"command_timeout_s":61}`), lowCaps, "limits.command_timeout_s", "allowed 1..60 s"},
		{"command timeout above job", withCmd(`"limits":{"command_timeout_s":60,"job_timeout_s":30}`), fuzzCaps, "limits.command_timeout_s", "60 exceeds the job timeout (limits.job_timeout_s) of 30 s; allowed 1..30 s"},
		{"job timeout 0", withCmd(`"limits":{"job_timeout_s":0}`), fuzzCaps, "limits.job_timeout_s", "0 is out of range; allowed 1..3600 s"},
		{"job timeout above cap", withCmd(`"limits":{"job_timeout_s":3601}`), fuzzCaps, "limits.job_timeout_s", "allowed 1..3600 s"},
		{"job timeout above operator cap", withCmd(`"limits":{"job_timeout_s":601}`), lowCaps, "limits.job_timeout_s", "allowed 1..600 s"},
		{"output 0", withCmd(`"limits":{"output_bytes":0}`), fuzzCaps, "limits.output_bytes", "0 is out of range; allowed 1..16777216 bytes"},
		{"output above cap", withCmd(`"limits":{"output_bytes":16777217}`), fuzzCaps, "limits.output_bytes", "allowed 1..16777216 bytes"},
		{"output above operator cap", withCmd(`"limits":{"output_bytes":4097}`), lowCaps, "limits.output_bytes", "allowed 1..4096 bytes"},
		{"tmpfs 0", withCmd(`"limits":{"tmpfs_mb":0}`), fuzzCaps, "limits.tmpfs_mb", "0 is out of range; allowed 1..1024 MiB"},
		{"tmpfs above cap", withCmd(`"limits":{"tmpfs_mb":1025}`), fuzzCaps, "limits.tmpfs_mb", "allowed 1..1024 MiB"},
		{"tmpfs above operator cap", withCmd(`"limits":{"tmpfs_mb":129}`), lowCaps, "limits.tmpfs_mb", "allowed 1..128 MiB"},
		{"limits unknown", withCmd(`"limits":{"swap_mb":1}`), fuzzCaps, "limits.swap_mb", "unknown field; limits allows: memory_mb, cpus, pids"},

		// document level (Decode)
		{"unknown field", withCmd(`"privileged":true`), fuzzCaps, "privileged", "unknown field; spec allows: v, id, command, image"},
		{"submitted_at", withCmd(`"submitted_at":"yesterday"`), fuzzCaps, "submitted_at", "RFC 3339"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := decodeAndValidate(tc.doc, tc.caps)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			var ve *ValidationError
			require.ErrorAs(t, err, &ve)
			assertFieldError(t, FieldErrors(err), tc.field, tc.msg)
		})
	}
}

func assertFieldError(t *testing.T, errs []FieldError, field, msg string) {
	t.Helper()
	for _, fe := range errs {
		if fe.Field == field && strings.Contains(fe.Message, msg) {
			return
		}
	}
	t.Errorf("no error for field %q containing %q in %+v", field, msg, errs)
}

// TestValidateGoBuiltSpecs covers specs built in Go (the client SDK), which
// never pass through Decode: the string checks of Validate itself must hold.
func TestValidateGoBuiltSpecs(t *testing.T) {
	t.Parallel()
	bad := string([]byte{0xff, 0xfe})
	i64 := func(v int64) *int64 { return &v }
	f64 := func(v float64) *float64 { return &v }
	cases := []struct {
		name  string
		spec  Spec
		field string
		msg   string
	}{
		{"command NUL", Spec{Command: "echo \x00"}, "command", "contains a NUL byte"},
		{"command invalid UTF-8", Spec{Command: "echo " + bad}, "command", "is not valid UTF-8"},
		{"env value NUL", Spec{Command: "x", Env: map[string]string{"A": "\x00"}}, "env.A", "NUL"},
		{"env value invalid UTF-8", Spec{Command: "x", Env: map[string]string{"A": bad}}, "env.A", "UTF-8"},
		{"env name NUL", Spec{Command: "x", Env: map[string]string{"A\x00": "x"}}, "env", "must match"},
		{"workdir NUL", Spec{Command: "x", Workdir: "/a\x00"}, "workdir", "NUL"},
		{"workdir invalid UTF-8", Spec{Command: "x", Workdir: "/" + bad}, "workdir", "UTF-8"},
		{"label value invalid UTF-8", Spec{Command: "x", Labels: map[string]string{"k": bad}}, "labels.k", "UTF-8"},
		{"label key NUL", Spec{Command: "x", Labels: map[string]string{"k\x00": "v"}}, "labels", "1-63"},
		{"id NUL", Spec{Command: "x", ID: "a\x00"}, "id", "[A-Za-z0-9._-]{1,128}"},
		{"id invalid UTF-8", Spec{Command: "x", ID: bad}, "id", "[A-Za-z0-9._-]{1,128}"},
		{"image NUL", Spec{Command: "x", Image: DefaultImage + "\x00"}, "image", "is not allowed"},
		{"queue NUL", Spec{Command: "x", Queue: "default\x00"}, "queue", "is not a configured queue"},
		{"heal mode NUL", Spec{Command: "x", Heal: &HealPolicy{Mode: "llm\x00"}}, "heal.mode", "off, rules, llm"},
		{"volume name NUL", Spec{Command: "x", Volume: &Volume{Name: "v\x00"}}, "volume.name", "1-64"},
		{"volume mode NUL", Spec{Command: "x", Volume: &Volume{Name: "v", Mode: "rw\x00"}}, "volume.mode", "rw or ro"},
		{"volume max_bytes min int64", Spec{Command: "x", Volume: &Volume{Name: "v", MaxBytes: -1 << 63}}, "volume.max_bytes", "is out of range; allowed 0..1099511627776 bytes (0 = no bound)"},
		{"volume max_bytes max int64", Spec{Command: "x", Volume: &Volume{Name: "v", MaxBytes: 1<<63 - 1}}, "volume.max_bytes", "is out of range; allowed 0..1099511627776 bytes (0 = no bound)"},
		{"volume delete on ro, Go-built", Spec{Command: "x", Volume: &Volume{Name: "v", Mode: VolumeRO, Delete: true}}, "volume.delete", "needs it mounted rw"},
		{"memory min int64", Spec{Command: "x", Limits: Limits{MemoryMB: i64(-1 << 63)}}, "limits.memory_mb", "allowed 6..2048 MiB"},
		{"cpus NaN", Spec{Command: "x", Limits: Limits{CPUs: f64(nan())}}, "limits.cpus", "allowed 0.01..2"},
		{"cpus +Inf", Spec{Command: "x", Limits: Limits{CPUs: f64(inf())}}, "limits.cpus", "allowed 0.01..2"},
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

func nan() float64 { var z float64; return z / z }
func inf() float64 { var z float64; return 1 / z }

func TestValidateNilSpec(t *testing.T) {
	t.Parallel()
	_, err := Validate(nil, Caps{})
	require.ErrorIs(t, err, ErrInvalid)
	assertFieldError(t, FieldErrors(err), "spec", "missing")
}

func TestValidateReportsEveryField(t *testing.T) {
	t.Parallel()
	doc := `{"command":"","id":"a b","image":"x","env":{"PATH":"/"},"workdir":"rel","queue":"q",
		"labels":{"-":"x"},"heal":{"mode":"m","max_attempts":9},"volume":{"name":"..","mode":"x"},
		"limits":{"memory_mb":0,"cpus":0,"pids":0,"command_timeout_s":0,"job_timeout_s":0,"output_bytes":0,"tmpfs_mb":0}}`
	_, err := decodeAndValidate(doc, Caps{Volumes: true})
	require.ErrorIs(t, err, ErrInvalid)
	var fields []string
	for _, fe := range FieldErrors(err) {
		fields = append(fields, fe.Field)
	}
	assert.ElementsMatch(t, []string{
		"command", "id", "image", "env.PATH", "workdir", "queue", "labels", "heal.mode", "heal.max_attempts",
		"volume.name", "volume.mode", "limits.memory_mb", "limits.pids", "limits.output_bytes", "limits.tmpfs_mb",
		"limits.command_timeout_s", "limits.job_timeout_s", "limits.cpus",
	}, fields)
	assert.Contains(t, err.Error(), "job: invalid spec: id: must match [A-Za-z0-9._-]{1,128}; command: must not be empty")
}

// acceptedDocs are valid under fuzzCaps; they seed the fuzz corpus too.
var acceptedDocs = []string{
	`{"command":"true"}`,
	`{"command":"echo hi","v":1,"id":"build-42.test_1"}`,
	`{"command":"x","v":0,"id":"","image":"","queue":"","workdir":""}`,
	`{"command":"python3 -c 'print(1)'","env":{"CI":"1","_X":"","LANG":"C.UTF-8"},"labels":{"pipeline":"ci","team/a.b-c":"x"}}`,
	`{"command":"make test","image":"paddock/sandbox:latest","queue":"default","workdir":"/workspace/src",
	  "limits":{"memory_mb":1024,"cpus":1.5,"pids":128,"command_timeout_s":60,"job_timeout_s":600,"output_bytes":65536,"tmpfs_mb":128},
	  "heal":{"mode":"llm","max_attempts":3,"allow_install":true,"retry_resource_kills":true},
	  "volume":{"name":"cache.v1","mode":"ro"},"submitted_at":"2026-01-02T03:04:05.123456789+02:00"}`,
	`{"command":"x","limits":{"memory_mb":6,"cpus":0.01,"pids":20,"command_timeout_s":1,"job_timeout_s":1,"output_bytes":1,"tmpfs_mb":1}}`,
	`{"command":"x","limits":{"memory_mb":2048,"cpus":2,"pids":512,"command_timeout_s":300,"job_timeout_s":3600,"output_bytes":16777216,"tmpfs_mb":1024}}`,
	`{"command":"x","limits":{"job_timeout_s":10}}`,
	`{"command":"x","grants":["github-read","a","` + strings.Repeat("b", 63) + `"]}`,
	`{"command":"x","grants":[]}`,
	`{"command":"x","heal":{},"volume":{"name":"v"},"env":{},"labels":{},"limits":{}}`,
	`{"command":"x","heal":{"mode":"off","max_attempts":0}}`,
	`{"command":"echo \"\ud83d\ude00\" \\ud800 \ufffd é"}`,
	`{"command":"x","submitted_at":"0001-01-01T00:00:00Z"}`,
	` {"command" : "x"} ` + "\n",
	// agent I/O
	`{"command":"sh run.sh","files":[{"path":"run.sh","content_b64":"ZWNobyBoaQo=","mode":"0755"},{"path":"data/in.csv","ref":"uploads/in.csv"},
	  {"path":"empty"},{"path":"é/ü ñ.txt","content_b64":"","mode":"400"},{"path":".hidden/..x/...","content_b64":"ZWNo\nbyBoaQo=\r\n","mode":"0777"}],
	  "stdin":"yes\n","output":{"keep":true},"artifacts":["out/*.xml","**","**/*.log","[a-c]?/\\*x","é*","[^.]*/[\\]]","a/**/b"]}`,
	`{"command":"x","volume":{"name":"v","mode":"rw"},"files":[{"path":"a/b"},{"path":"a/c"},{"path":"ab"}],"output":{"keep":false},"stdin":""}`,
	`{"command":"x","files":[],"artifacts":[],"output":{}}`,
	`{"command":"x","files":[{"path":"` + longPath() + `","ref":"` + strings.Repeat("r", MaxRefBytes) + `"}]}`,
	`{"command":"x","files":[` + manyFiles(MaxFiles) + `],"artifacts":[` + manyPatterns(MaxArtifactPatterns) + `]}`,
	`{"command":"x","stdin":"` + strings.Repeat("i", MaxStdinBytes) + `"}`,
	`{"command":"x","files":[{"path":"big","content_b64":"` + base64.StdEncoding.EncodeToString(make([]byte, DefaultInlineBytes)) + `"}]}`,
	// agent sessions: a quota at its bound, delete, spill; zero values on ro
	`{"command":"x","volume":{"name":"sess-1","mode":"rw","max_bytes":1099511627776,"delete":true},"output":{"spill":true}}`,
	`{"command":"x","volume":{"name":"sess-1","max_bytes":1048576},"output":{"spill":true,"keep":true}}`,
	`{"command":"x","volume":{"name":"v","mode":"ro","max_bytes":0,"delete":false},"output":{"spill":false}}`,
	// last: BenchmarkDecodeValidate takes it as its 64 KiB command
	`{"command":"` + strings.Repeat("x", MaxCommandBytes) + `"}`,
}

func TestValidateAccepts(t *testing.T) {
	t.Parallel()
	for _, doc := range acceptedDocs {
		_, err := decodeAndValidate(doc, fuzzCaps)
		assert.NoError(t, err, "%.200s", doc)
	}
}

func TestValidateEffective(t *testing.T) {
	t.Parallel()
	defaults := Effective{MemoryMB: 512, CPUs: 0.5, Pids: 64, CommandTimeout: 30 * time.Second,
		JobTimeout: 300 * time.Second, OutputBytes: 1 << 20, TmpfsMB: 64}
	cases := []struct {
		name string
		doc  string
		caps Caps
		want Effective
	}{
		{"defaults", `{"command":"x"}`, Caps{}, defaults},
		{"every limit", `{"command":"x","limits":{"memory_mb":1024,"cpus":1.5,"pids":128,"command_timeout_s":60,"job_timeout_s":600,"output_bytes":65536,"tmpfs_mb":128}}`, Caps{},
			Effective{MemoryMB: 1024, CPUs: 1.5, Pids: 128, CommandTimeout: time.Minute, JobTimeout: 10 * time.Minute, OutputBytes: 65536, TmpfsMB: 128}},
		{"at the caps", `{"command":"x","limits":{"memory_mb":2048,"cpus":2,"pids":512,"command_timeout_s":300,"job_timeout_s":3600,"output_bytes":16777216,"tmpfs_mb":1024}}`, Caps{},
			Effective{MemoryMB: 2048, CPUs: 2, Pids: 512, CommandTimeout: 300 * time.Second, JobTimeout: time.Hour, OutputBytes: 16 << 20, TmpfsMB: 1024}},
		{"operator defaults", `{"command":"x"}`,
			Caps{DefaultMemoryMB: 256, DefaultCPUs: 1, DefaultPids: 32, DefaultOutputBytes: 4096, DefaultTmpfsMB: 16, DefaultCommandTimeout: 5 * time.Second, DefaultJobTimeout: time.Minute},
			Effective{MemoryMB: 256, CPUs: 1, Pids: 32, CommandTimeout: 5 * time.Second, JobTimeout: time.Minute, OutputBytes: 4096, TmpfsMB: 16}},
		{"operator default above built-in cap raises the cap", `{"command":"x","limits":{"memory_mb":4096}}`, Caps{DefaultMemoryMB: 4096},
			func() Effective { e := defaults; e.MemoryMB = 4096; return e }()},
		{"short job clamps the default command timeout", `{"command":"x","limits":{"job_timeout_s":10}}`, Caps{},
			func() Effective {
				e := defaults
				e.CommandTimeout, e.JobTimeout = 10*time.Second, 10*time.Second
				return e
			}()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			eff, err := decodeAndValidate(tc.doc, tc.caps)
			require.NoError(t, err)
			assert.Equal(t, tc.want, eff)
		})
	}
}

func TestValidateEnvAllowlist(t *testing.T) {
	t.Parallel()
	caps := Caps{EnvAllow: []string{"CI", "APP_*", "PATH"}}
	_, err := decodeAndValidate(withCmd(`"env":{"CI":"1","APP_MODE":"x","APP_":"y"}`), caps)
	require.NoError(t, err)
	_, err = decodeAndValidate(withCmd(`"env":{"PATH":"/x"}`), caps)
	assertFieldError(t, FieldErrors(err), "env.PATH", "reserved") // reserved wins over the allowlist
	_, err = decodeAndValidate(withCmd(`"env":{"CIX":"1"}`), caps)
	assertFieldError(t, FieldErrors(err), "env.CIX", "allowlist")
}

func TestValidateDoesNotMutate(t *testing.T) {
	t.Parallel()
	s, err := Decode([]byte(`{"command":"x","volume":{"name":"v"}}`))
	require.NoError(t, err)
	before := s
	_, err = Validate(&s, fuzzCaps)
	require.NoError(t, err)
	assert.Equal(t, before, s)
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	s := Spec{Command: "x", Volume: &Volume{Name: "v"}}
	Normalize(&s, Caps{})
	assert.Equal(t, Version, s.V)
	assert.Equal(t, DefaultImage, s.Image)
	assert.Equal(t, DefaultQueue, s.Queue)
	assert.Equal(t, VolumeRW, s.Volume.Mode)

	s = Spec{Command: "x", Image: "b:2", Queue: "slow", Volume: &Volume{Name: "v", Mode: VolumeRO}}
	caps := Caps{Images: []string{"a:1", "b:2"}, Queues: []string{"fast", "slow"}, Volumes: true}
	Normalize(&s, caps)
	assert.Equal(t, "b:2", s.Image)
	assert.Equal(t, "slow", s.Queue)
	assert.Equal(t, VolumeRO, s.Volume.Mode)

	s = Spec{Command: "x"}
	Normalize(&s, caps)
	assert.Equal(t, "a:1", s.Image, "the operator's first image")
	assert.Equal(t, "fast", s.Queue, "the operator's first queue")
	assert.Nil(t, s.Volume)
	_, err := Validate(&s, caps)
	assert.NoError(t, err, "a normalized spec stays valid")
}

func TestFieldErrors(t *testing.T) {
	t.Parallel()
	assert.Nil(t, FieldErrors(nil))

	_, err := decodeAndValidate(`{"command":"","limits":{"pids":0}}`, Caps{})
	want := []FieldError{
		{Field: "command", Message: "must not be empty; allowed 1..65536 bytes"},
		{Field: "limits.pids", Message: "0 is out of range; allowed 20..512"},
	}
	assert.Equal(t, want, FieldErrors(err))
	assert.Equal(t, want, FieldErrors(fmt.Errorf("scheduler: %w", err)), "found through wrapping")
	assert.Equal(t, "limits.pids: 0 is out of range; allowed 20..512", want[1].Error())

	other := errors.New("redis: down")
	assert.Equal(t, []FieldError{{Field: "spec", Message: "redis: down"}}, FieldErrors(other))
	assert.NotErrorIs(t, other, ErrInvalid)

	b, err := json.Marshal(want[0])
	require.NoError(t, err)
	assert.JSONEq(t, `{"field":"command","message":"must not be empty; allowed 1..65536 bytes"}`, string(b))
}

func TestValidIDAndReservedEnv(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"a", "A-1", "x.y_z", ".", "..", strings.Repeat("a", 128)} {
		assert.True(t, ValidID(id), id)
	}
	for _, id := range []string{"", "a b", "a/b", "a*", ">", "é", strings.Repeat("a", 129), "a\n"} {
		assert.False(t, ValidID(id), id)
	}
	for _, n := range []string{"PATH", "LD_ANYTHING", "PADDOCK_X", "BASH_FUNC_f", "GLIBC_TUNABLES", "TRACEPARENT"} {
		assert.True(t, IsReservedEnv(n), n)
	}
	for _, n := range []string{"path", "CI", "LANG", "PADDOCK", "LDX"} {
		assert.False(t, IsReservedEnv(n), n)
	}
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "abc", Truncate("abc", 3))
	assert.Equal(t, "ab…", Truncate("abc", 2))
	assert.Equal(t, "a…", Truncate("aé", 2), "never cuts a rune")
}
