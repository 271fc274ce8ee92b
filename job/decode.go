package job

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// maxDecodeErrors bounds how many field errors Decode reports for one document.
const maxDecodeErrors = 20

// Decode parses one spec strictly and reports every problem with the full
// dotted path of the field ("limits.memory_mb", "env.FOO"):
//
//   - the document must be at most MaxSpecBytes of valid UTF-8 without NUL
//     bytes, holding exactly one JSON object (no trailing data);
//   - object keys must match the contract exactly: unknown keys, keys that
//     differ only in case ("Command") and duplicate keys are errors
//     (encoding/json alone would accept the first two and let the last
//     duplicate win);
//   - every value must have the contract's JSON type; null is refused (omit a
//     field to take its default); integers must be written without fraction
//     or exponent and fit in 64 bits;
//   - no string, key or value, may contain an escaped NUL (\u0000) or an
//     escaped lone UTF-16 surrogate (\ud800), which encoding/json would
//     silently turn into U+FFFD, running a different command than was sent.
//
// Empty env and labels objects decode to nil maps and submitted_at to UTC,
// so that a decoded spec re-encodes to a document that decodes to an equal
// value. Every error wraps ErrInvalid and is a *ValidationError. Decode does
// not check operator caps or field contents; call Validate for that.
func Decode(data []byte) (Spec, error) {
	if len(data) > MaxSpecBytes {
		return Spec{}, invalid("spec", fmt.Sprintf("document is %d bytes; at most %d allowed", len(data), MaxSpecBytes))
	}
	if i := invalidUTF8At(data); i >= 0 {
		return Spec{}, invalid("spec", fmt.Sprintf("document is not valid UTF-8 (at byte %d)", i))
	}
	if i := bytes.IndexByte(data, 0); i >= 0 {
		return Spec{}, invalid("spec", fmt.Sprintf("document contains a NUL byte (at byte %d)", i))
	}
	if errs := checkShape(data); len(errs) > 0 {
		return Spec{}, &ValidationError{Fields: errs}
	}
	var s Spec
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		// checkShape accepted the document, so encoding/json should too; if the
		// two ever disagree the document is still refused, never half-read.
		return Spec{}, invalid(jsonField(err), jsonMessage(err))
	}
	if len(s.Env) == 0 {
		s.Env = nil
	}
	if len(s.Labels) == 0 {
		s.Labels = nil
	}
	if len(s.Files) == 0 {
		s.Files = nil
	}
	if len(s.Grants) == 0 {
		s.Grants = nil
	}
	if len(s.Artifacts) == 0 {
		s.Artifacts = nil
	}
	s.SubmittedAt = s.SubmittedAt.UTC()
	return s, nil
}

func invalid(field, msg string) error {
	return &ValidationError{Fields: []FieldError{{Field: field, Message: msg}}}
}

func invalidUTF8At(data []byte) int {
	for i := 0; i < len(data); {
		if data[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// jsonField extracts the offending field from encoding/json's errors; since
// Go 1.20 UnmarshalTypeError.Field is the full dotted path for struct fields.
func jsonField(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return te.Field
	}
	return "spec"
}

func jsonMessage(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("expected %s, got JSON %s", te.Type, te.Value)
	}
	return "malformed JSON: " + strings.TrimPrefix(err.Error(), "json: ")
}

// shapeChecker walks a document's tokens alongside the Go type it must fill
// and records every structural error with its dotted path.
type shapeChecker struct {
	dec  *json.Decoder
	data []byte
	errs []FieldError
}

// errStop ends a walk: the JSON is malformed or too many errors were found.
var errStop = errors.New("stop")

var textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()

func checkShape(data []byte) []FieldError {
	if len(bytes.Trim(data, " \t\r\n")) == 0 {
		return []FieldError{{Field: "spec", Message: "document is empty; expected a JSON object"}}
	}
	c := &shapeChecker{dec: json.NewDecoder(bytes.NewReader(data)), data: data}
	c.dec.UseNumber()
	if err := c.value("", reflect.TypeFor[Spec]()); err != nil {
		return c.errs
	}
	end := int(c.dec.InputOffset())
	if _, err := c.dec.Token(); err != io.EOF {
		for end < len(data) && strings.IndexByte(" \t\r\n", data[end]) >= 0 {
			end++
		}
		c.add("spec", fmt.Sprintf("trailing data after the JSON object (at byte %d)", end))
	}
	return c.errs
}

func (c *shapeChecker) add(field, msg string) error {
	if len(c.errs) == maxDecodeErrors {
		c.errs = append(c.errs, FieldError{Field: "spec", Message: fmt.Sprintf("more than %d errors; stopped", maxDecodeErrors)})
		return errStop
	}
	if len(c.errs) > maxDecodeErrors {
		return errStop
	}
	c.errs = append(c.errs, FieldError{Field: field, Message: msg})
	return nil
}

func (c *shapeChecker) token() (json.Token, error) {
	tok, err := c.dec.Token()
	if err == nil {
		return tok, nil
	}
	off := c.dec.InputOffset()
	var se *json.SyntaxError
	if errors.As(err, &se) {
		off = se.Offset
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		msg = "unexpected end of document"
	}
	c.add("spec", fmt.Sprintf("malformed JSON at byte %d: %s", off, msg))
	return nil, errStop
}

// value checks the next JSON value against t, recording errors under path.
// It returns errStop only when the walk cannot go on.
func (c *shapeChecker) value(path string, t reflect.Type) error {
	start := c.dec.InputOffset()
	tok, err := c.token()
	if err != nil {
		return err
	}
	if tok == nil {
		return c.add(orSpec(path), "null is not allowed; omit the field to take its default")
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(textUnmarshalerType) {
		return c.textValue(path, t, tok, start)
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		if tok != json.Delim('{') {
			return c.mismatch(path, t, tok)
		}
		return c.object(path, t)
	case reflect.Slice:
		if tok != json.Delim('[') {
			return c.mismatch(path, t, tok)
		}
		return c.array(path, t)
	case reflect.String:
		s, ok := tok.(string)
		if !ok {
			return c.mismatch(path, t, tok)
		}
		return c.str(path, s, start)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := tok.(json.Number)
		if !ok {
			return c.mismatch(path, t, tok)
		}
		if _, err := strconv.ParseInt(string(n), 10, t.Bits()); err != nil {
			if errors.Is(err, strconv.ErrRange) && integerPattern.MatchString(string(n)) {
				return c.add(path, fmt.Sprintf("%s does not fit in a %d-bit integer", Truncate(string(n), 40), t.Bits()))
			}
			return c.add(path, fmt.Sprintf("%s is not an integer; write whole numbers without fraction or exponent", Truncate(string(n), 40)))
		}
		return nil
	case reflect.Float32, reflect.Float64:
		n, ok := tok.(json.Number)
		if !ok {
			return c.mismatch(path, t, tok)
		}
		if _, err := strconv.ParseFloat(string(n), t.Bits()); err != nil {
			return c.add(path, fmt.Sprintf("%s is out of range for a number", Truncate(string(n), 40)))
		}
		return nil
	case reflect.Bool:
		if _, ok := tok.(bool); !ok {
			return c.mismatch(path, t, tok)
		}
		return nil
	default:
		// Not reachable for Spec; refuse rather than guess.
		return c.add(orSpec(path), "unsupported field type "+t.String())
	}
}

// textValue checks a value of a type that unmarshals from a JSON string
// (time.Time), whose first token tok started at byte offset start.
func (c *shapeChecker) textValue(path string, t reflect.Type, tok json.Token, start int64) error {
	s, ok := tok.(string)
	if !ok {
		return c.mismatch(path, t, tok)
	}
	n := len(c.errs)
	if err := c.str(path, s, start); err != nil || len(c.errs) > n {
		return err // nil unless the walk must stop: the string is consumed
	}
	v := reflect.New(t)
	if err := v.Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
		return c.add(path, fmt.Sprintf("%q is not %s", Truncate(s, 40), jsonKind(t)))
	}
	if tm, ok := v.Interface().(*time.Time); ok {
		// Decode stores times in UTC, which must stay encodable.
		if y := tm.UTC().Year(); y < 0 || y > 9999 {
			return c.add(path, fmt.Sprintf("%q is outside years 0000..9999 UTC", Truncate(s, 40)))
		}
	}
	return nil
}

var integerPattern = regexp.MustCompile(`^-?[0-9]+$`)

// object checks the members of an object whose '{' was just read.
func (c *shapeChecker) object(path string, t reflect.Type) error {
	var fields map[string]reflect.StructField
	if t.Kind() == reflect.Struct {
		fields = jsonFields(t)
	}
	seen := make(map[string]bool)
	for c.dec.More() {
		start := c.dec.InputOffset()
		tok, err := c.token()
		if err != nil {
			return err
		}
		key := tok.(string) // encoding/json only returns string keys
		kpath := joinPath(path, key)
		var elem reflect.Type
		if fields != nil {
			f, ok := fields[key]
			if !ok {
				if err := c.add(kpath, unknownFieldMessage(path, key, t)); err != nil {
					return err
				}
				if err := c.skip(); err != nil {
					return err
				}
				continue
			}
			elem = f.Type
		} else {
			if err := c.str(kpath, key, start); err != nil {
				return err
			}
			elem = t.Elem()
		}
		if seen[key] {
			if err := c.add(kpath, "duplicate key; each key may appear once"); err != nil {
				return err
			}
			if err := c.skip(); err != nil {
				return err
			}
			continue
		}
		seen[key] = true
		if err := c.value(kpath, elem); err != nil {
			return err
		}
	}
	_, err := c.token() // '}'
	return err
}

// array checks the elements of an array whose '[' was just read, each
// under path[i].
func (c *shapeChecker) array(path string, t reflect.Type) error {
	for i := 0; c.dec.More(); i++ {
		if err := c.value(fmt.Sprintf("%s[%d]", orSpec(path), i), t.Elem()); err != nil {
			return err
		}
	}
	_, err := c.token() // ']'
	return err
}

// str refuses escaped NULs and escaped lone surrogates in a decoded string
// whose token started at byte offset start.
func (c *shapeChecker) str(path, s string, start int64) error {
	if strings.IndexByte(s, 0) >= 0 {
		return c.add(orSpec(path), `contains a NUL character (\u0000)`)
	}
	if strings.ContainsRune(s, utf8.RuneError) && hasLoneSurrogate(c.data[start:c.dec.InputOffset()]) {
		return c.add(orSpec(path), `contains an escaped lone UTF-16 surrogate (such as \ud800), which is not valid Unicode`)
	}
	return nil
}

// mismatch records a type error and skips the rest of the offending value.
func (c *shapeChecker) mismatch(path string, t reflect.Type, tok json.Token) error {
	if err := c.add(orSpec(path), fmt.Sprintf("expected %s, got %s", jsonKind(t), tokenKind(tok))); err != nil {
		return err
	}
	return c.skipRest(tok)
}

// skip skips the next value.
func (c *shapeChecker) skip() error {
	tok, err := c.token()
	if err != nil {
		return err
	}
	return c.skipRest(tok)
}

// skipRest skips what is left of a value whose first token was tok.
func (c *shapeChecker) skipRest(tok json.Token) error {
	if tok != json.Delim('{') && tok != json.Delim('[') {
		return nil
	}
	for depth := 1; depth > 0; {
		tok, err := c.token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return nil
}

// hasLoneSurrogate reports whether raw JSON text holds a \u escape of a UTF-16
// surrogate that is not part of a high+low pair.
func hasLoneSurrogate(raw []byte) bool {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if i+5 >= len(raw) || raw[i+1] != 'u' {
			i++ // skip the escaped character (it may be a backslash)
			continue
		}
		r := hex4(raw[i+2 : i+6])
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if i+11 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
				if lo := hex4(raw[i+8 : i+12]); lo >= 0xDC00 && lo < 0xE000 {
					i += 11
					continue
				}
			}
			return true
		case r >= 0xDC00 && r < 0xE000:
			return true
		}
		i += 5
	}
	return false
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

var fieldCache sync.Map // reflect.Type → map[string]reflect.StructField

// jsonFields maps the JSON names of t's fields to the fields.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.StructField)
	}
	m := make(map[string]reflect.StructField)
	for _, f := range reflect.VisibleFields(t) {
		if name := jsonName(f); name != "" {
			m[name] = f
		}
	}
	fieldCache.Store(t, m)
	return m
}

// jsonName is the JSON key of a struct field, or "" when it has none.
func jsonName(f reflect.StructField) string {
	if !f.IsExported() || f.Anonymous {
		return ""
	}
	tag := f.Tag.Get("json")
	if tag == "-" {
		return ""
	}
	if name, _, _ := strings.Cut(tag, ","); name != "" {
		return name
	}
	return f.Name
}

// jsonNames lists the JSON keys of t's fields in declaration order.
func jsonNames(t reflect.Type) []string {
	var names []string
	for _, f := range reflect.VisibleFields(t) {
		if name := jsonName(f); name != "" {
			names = append(names, name)
		}
	}
	return names
}

func unknownFieldMessage(path, key string, t reflect.Type) string {
	names := jsonNames(t)
	loose := func(s string) string { return strings.ReplaceAll(s, "_", "") }
	for _, n := range names {
		if strings.EqualFold(loose(n), loose(key)) {
			return fmt.Sprintf("unknown field; did you mean %q? (names are exact and case-sensitive)", n)
		}
	}
	return fmt.Sprintf("unknown field; %s allows: %s", orSpec(path), strings.Join(names, ", "))
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_./-]{1,64}$`)

// joinPath appends key to a dotted path, quoting keys that are not plain.
func joinPath(path, key string) string {
	if !plainKey.MatchString(key) {
		key = strconv.Quote(Truncate(key, 40))
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func orSpec(path string) string {
	if path == "" {
		return "spec"
	}
	return path
}

// jsonKind names the JSON type a Go type is written as.
func jsonKind(t reflect.Type) string {
	if t == reflect.TypeFor[time.Time]() {
		return "an RFC 3339 time string (e.g. 2006-01-02T15:04:05Z)"
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice:
		return "an array"
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	}
	return t.String()
}

func tokenKind(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		if v == '[' {
			return "an array"
		}
		return "an object"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "null"
}
