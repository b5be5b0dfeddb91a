package agentsociety

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// decodeArgs decodes a model's arguments for tool into v (a pointer to a
// struct), as a built-in tool reads them. Empty arguments leave v as it is.
// Arguments that do not decode are refused with an ErrInvalidArgument whose
// message tells the model what to fix, and so is a key that v does not
// declare, at any depth: a brief sent under a misspelt key must not read as
// a brief with every field missing. The message names the key and the
// nearest one v declares. A value that v takes as an object but that the
// model wrote as a string holding one (a brief passed as JSON text) is read
// as that object. The key end_turn, which every tool accepts (see
// endsTurn), is skipped.
func decodeArgs(tool string, args json.RawMessage, v any) error {
	if len(bytes.TrimSpace(args)) == 0 {
		return nil
	}
	t := reflect.TypeOf(v).Elem()
	var obj map[string]json.RawMessage
	if !plainArgs(args, t) && json.Unmarshal(args, &obj) == nil {
		delete(obj, endTurnKey)
		unwrapped := unwrapObjects(obj, t)
		if key, near := unknownKey(obj, t, ""); key != "" {
			return &Error{Code: ErrInvalidArgument, Message: unknownKeyProblem(tool, key, near, t)}
		}
		if unwrapped {
			args, _ = json.Marshal(obj) // a map of raw values always encodes
		}
	}
	return decodeLenient(tool, args, v)
}

// plainArgs reports whether args, a JSON object, has only keys that t
// declares (and end_turn), written as t declares them, at every level
// where t declares a struct or a slice of structs, and there an object,
// an array of objects or null: arguments that decode as they are, which
// is what a model almost always sends. It says false at any doubt (a key
// with an escape, a string where a struct is declared), and decodeArgs
// then takes the long way, which says what is wrong. It checks no more of
// the JSON's form than it needs: decoding does.
func plainArgs(args []byte, t reflect.Type) bool {
	w := argsWalker{data: args}
	if !w.object(t, true) {
		return false
	}
	w.space()
	return w.i == len(w.data)
}

// argsWalker walks a model's JSON arguments for plainArgs, from data[i].
type argsWalker struct {
	data []byte
	i    int
}

// object walks an object whose keys t declares (or end_turn, at the top).
func (w *argsWalker) object(t reflect.Type, top bool) bool {
	_, types := jsonFields(t)
	if !w.next('{') {
		return false
	}
	if w.next('}') {
		return true
	}
	for {
		key, ok := w.key()
		if !ok || !w.next(':') {
			return false
		}
		ft, declared := types[string(key)]
		switch {
		case declared && !w.value(ft):
			return false
		case !declared && !(top && string(key) == endTurnKey && w.skip()):
			return false
		}
		if w.next('}') {
			return true
		}
		if !w.next(',') {
			return false
		}
	}
}

// value walks a value of a field of type ft.
func (w *argsWalker) value(ft reflect.Type) bool {
	st := structType(ft)
	if st == nil && (ft.Kind() == reflect.Slice || ft.Kind() == reflect.Array) {
		if st = structType(ft.Elem()); st != nil {
			if w.null() {
				return true
			}
			if !w.next('[') {
				return false
			}
			if w.next(']') {
				return true
			}
			for {
				if !w.null() && !w.object(st, false) {
					return false
				}
				if w.next(']') {
					return true
				}
				if !w.next(',') {
					return false
				}
			}
		}
	}
	if st != nil {
		return w.null() || w.object(st, false)
	}
	return w.skip()
}

// key reads an object key without escapes.
func (w *argsWalker) key() ([]byte, bool) {
	w.space()
	if w.i >= len(w.data) || w.data[w.i] != '"' {
		return nil, false
	}
	end := bytes.IndexByte(w.data[w.i+1:], '"')
	if end < 0 {
		return nil, false
	}
	key := w.data[w.i+1 : w.i+1+end]
	if bytes.IndexByte(key, '\\') >= 0 {
		return nil, false
	}
	w.i += end + 2
	return key, true
}

// skip passes over one value of any kind.
func (w *argsWalker) skip() bool {
	w.space()
	if w.i >= len(w.data) {
		return false
	}
	switch w.data[w.i] {
	case '"':
		return w.str()
	case '{', '[':
		for depth := 0; w.i < len(w.data); w.i++ {
			switch w.data[w.i] {
			case '"':
				if !w.str() {
					return false
				}
				w.i-- // at the closing quote, which the loop passes
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					w.i++
					return true
				}
			}
		}
		return false
	}
	start := w.i // a number, true, false or null
	for w.i < len(w.data) && strings.IndexByte(" \t\r\n,}]", w.data[w.i]) < 0 {
		w.i++
	}
	return w.i > start
}

// str passes over a string, at its opening quote.
func (w *argsWalker) str() bool {
	for j := w.i + 1; j < len(w.data); j++ {
		switch w.data[j] {
		case '\\':
			j++
		case '"':
			w.i = j + 1
			return true
		}
	}
	return false
}

// null passes over a null, if that is what comes next.
func (w *argsWalker) null() bool {
	w.space()
	if bytes.HasPrefix(w.data[w.i:], []byte("null")) {
		w.i += len("null")
		return true
	}
	return false
}

// next passes over c, if it comes next after white space.
func (w *argsWalker) next(c byte) bool {
	w.space()
	if w.i < len(w.data) && w.data[w.i] == c {
		w.i++
		return true
	}
	return false
}

func (w *argsWalker) space() {
	for w.i < len(w.data) && (w.data[w.i] == ' ' || w.data[w.i] == '\t' || w.data[w.i] == '\n' || w.data[w.i] == '\r') {
		w.i++
	}
}

// decodeLenient decodes as encoding/json does, ignoring keys v does not
// declare; errors are as decodeArgs's.
func decodeLenient(tool string, args json.RawMessage, v any) error {
	if len(bytes.TrimSpace(args)) == 0 {
		return nil
	}
	if err := json.Unmarshal(args, v); err != nil {
		return &Error{Code: ErrInvalidArgument, Message: "bad arguments for " + tool + ": " + argsProblem(err)}
	}
	return nil
}

// endTurnKey is the argument by which a model ends its turn with a tool
// call, in the same answer.
const endTurnKey = "end_turn"

// endsTurn reports whether a tool call's arguments say end_turn: true.
// The boolean written as a string ("true"), which decodeArgs accepts as it
// accepts any end_turn, counts too.
func endsTurn(args json.RawMessage) bool {
	var a struct {
		EndTurn json.RawMessage `json:"end_turn"`
	}
	if json.Unmarshal(args, &a) != nil {
		return false
	}
	v := string(a.EndTurn)
	return v == "true" || v == `"true"`
}

// jsonFields returns the JSON keys a struct type declares, each with its
// field's type, in declaration order. They are worked out once for each
// type, since every tool call asks again; the caller must not modify them.
func jsonFields(t reflect.Type) (names []string, types map[string]reflect.Type) {
	if f, ok := declared.Load(t); ok {
		f := f.(*fieldsOf)
		return f.names, f.types
	}
	types = map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
		types[name] = f.Type
	}
	declared.Store(t, &fieldsOf{names, types})
	return names, types
}

// declared holds jsonFields's answers, by struct type.
var declared sync.Map // reflect.Type -> *fieldsOf

type fieldsOf struct {
	names []string
	types map[string]reflect.Type
}

// structType returns the struct type that t points to or is, or nil.
func structType(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeFor[time.Time]() {
		return nil
	}
	return t
}

// unwrapObjects replaces, in obj, a string holding a JSON object where t
// declares a struct by that object, and reports whether it replaced any.
func unwrapObjects(obj map[string]json.RawMessage, t reflect.Type) (replaced bool) {
	_, types := jsonFields(t)
	for k, raw := range obj {
		if ft, ok := types[k]; !ok || structType(ft) == nil || len(raw) == 0 || raw[0] != '"' {
			continue
		}
		var text string
		if json.Unmarshal(raw, &text) == nil && isJSONObject([]byte(text)) {
			obj[k] = json.RawMessage(text)
			replaced = true
		}
	}
	return replaced
}

// unknownKey returns the first key, in sorted order and depth first, that
// obj (and the objects nested in it where t declares structs) has and t
// does not declare, with its path from the top, and the nearest key t
// declares at that level ("" when none is near).
func unknownKey(obj map[string]json.RawMessage, t reflect.Type, path string) (key, near string) {
	names, types := jsonFields(t)
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		ft, ok := types[k]
		if !ok {
			return path + k, nearestKey(k, names)
		}
		st := structType(ft)
		if st == nil && (ft.Kind() == reflect.Slice || ft.Kind() == reflect.Array) {
			st = structType(ft.Elem())
		}
		if st == nil {
			continue
		}
		items := []json.RawMessage{obj[k]}
		if v := bytes.TrimSpace(obj[k]); len(v) > 0 && v[0] == '[' {
			items = nil // an array that does not decode is left to decoding
			json.Unmarshal(v, &items)
		}
		for _, item := range items {
			var sub map[string]json.RawMessage
			if json.Unmarshal(item, &sub) != nil {
				continue // a wrong kind of value: decoding says so
			}
			if key, near := unknownKey(sub, st, path+k+"."); key != "" {
				return key, near
			}
		}
	}
	return "", ""
}

// unknownKeyProblem says, for the model, which key is unknown and what it
// may have meant.
func unknownKeyProblem(tool, key, near string, t reflect.Type) string {
	msg := "unknown argument " + strconvQuote(key) + " for " + tool
	if near != "" {
		parent, _, _ := cutLast(key, ".")
		if parent != "" {
			near = parent + "." + near
		}
		msg += ": did you mean " + strconvQuote(near) + "?"
	} else {
		msg += "."
	}
	names, _ := jsonFields(t)
	return msg + " The arguments are: " + strings.Join(names, ", ") + "."
}

// cutLast slices s around the last sep: "a.b.c" gives "a.b" and "c".
func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return "", s, false
}

// nearestKey returns the key of known that key most likely means: the same
// letters ignoring case, '_' and '-' (task_brief for taskBrief), one
// containing the other (brief for taskBrief), or within a small edit
// distance; "" when none is near.
func nearestKey(key string, known []string) string {
	nk, best, bestD := normKey(key), "", 0
	for _, k := range known {
		n := normKey(k)
		d := editDistance(nk, n)
		switch {
		case n == nk:
			return k
		case len(nk) >= 3 && (strings.Contains(n, nk) || strings.Contains(nk, n)):
			d = 1
		}
		if best == "" || d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" || bestD > max(2, len(nk)/3) {
		return ""
	}
	return best
}

// normKey is s in lower case without '_', '-' and spaces: how nearestKey
// compares names.
func normKey(s string) string {
	return strings.ToLower(strings.NewReplacer("_", "", "-", "", " ", "").Replace(s))
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// argsProblem says, for the model that wrote the arguments, why they did
// not decode.
func argsProblem(err error) string {
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		return fmt.Sprintf("the arguments are not valid JSON (%v, at byte %d)", syntax, syntax.Offset)
	}
	var typ *json.UnmarshalTypeError
	if !errors.As(err, &typ) || typ.Type == nil {
		return err.Error()
	}
	given, _, _ := strings.Cut(typ.Value, " ") // "number 1.5" names the number
	switch given {
	case "bool":
		given = "true or false"
	case "object":
		given = "a JSON object"
	case "array":
		given = "an array"
	default: // "string", "number"
		given = "a " + given
	}
	want := jsonKind(typ.Type)
	if typ.Field == "" {
		return "the arguments must be " + want + ", not " + given
	}
	n, _ := strings.CutPrefix(typ.Value, "number ")
	if given == want || want == "a whole number" && given == "a number" && !strings.ContainsAny(n, ".eE") {
		// A number too large for its Go type (a whole number for an
		// integer: encoding/json says only "number" for both).
		return strconvQuote(typ.Field) + " holds a number out of range: " + n + " is too large"
	}
	if want == "a whole number" && given == "a number" {
		// A fraction, or a whole number written as one (1e3, 10.0),
		// which encoding/json does not take for an integer.
		if f, err := strconv.ParseFloat(n, 64); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return strconvQuote(typ.Field) + " holds " + n + ", which is not written as a whole number: write it in digits only, as " + strconv.FormatFloat(f, 'f', -1, 64)
		}
		return strconvQuote(typ.Field) + " holds " + n + " where a whole number is expected"
	}
	return strconvQuote(typ.Field) + " holds " + given + " where " + want + " is expected"
}

// jsonKind names the JSON value that decodes into a value of type t.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "an array"
	case reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "a JSON object"
	}
	return "another kind of value"
}
