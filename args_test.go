package agentsociety

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// spawnArgs is spawn_agent's arguments, as toolSpawn declares them.
type spawnArgs struct {
	RoleID        string     `json:"roleId"`
	TaskBrief     *TaskBrief `json:"taskBrief"`
	ParentAgentID string     `json:"parentAgentId"`
	Budget        *Budget    `json:"budget"`
}

// TestPlainArgsNeedNothingMore: arguments that plainArgs lets decode at
// once are arguments in which the long way finds no unknown key and no
// object written as a string, whatever their keys, values and spacing;
// and a model's usual spawn arguments are plain.
func TestPlainArgsNeedNothingMore(t *testing.T) {
	typ := reflect.TypeFor[spawnArgs]()
	brief, _ := json.Marshal(TaskBrief{Objective: "o {\"x\"}", Constraints: []string{"a", "b\\\""}, Inputs: "i", Outputs: "o", CompletionCriteria: "c",
		Collaborators: []Collaborator{{AgentID: "agent-2", InterfaceSpec: &InterfaceSpec{Services: "x"}}}})
	usual := `{"roleId":"role-3","end_turn":true,"taskBrief":` + string(brief) + `, "budget": {"model_calls": 3}}`
	if !plainArgs([]byte(usual), typ) {
		t.Fatalf("usual spawn arguments are not plain: %s", usual)
	}
	plain := 0
	rapid.Check(t, func(t *rapid.T) {
		args := genObject(t, typ, true, 0)
		if !plainArgs([]byte(args), typ) {
			return
		}
		plain++
		var obj map[string]json.RawMessage
		if json.Unmarshal([]byte(args), &obj) != nil {
			return // decoding says what is wrong
		}
		delete(obj, endTurnKey)
		if unwrapObjects(obj, typ) {
			t.Fatalf("plain arguments hold an object written as a string: %s", args)
		}
		if key, _ := unknownKey(obj, typ, ""); key != "" {
			t.Fatalf("plain arguments hold the unknown key %q: %s", key, args)
		}
	})
	if plain == 0 {
		t.Fatal("no generated arguments were plain: the test checks nothing")
	}
}

// genObject draws JSON text for an object of struct type typ: its keys,
// keys it does not declare or declares in another case, end_turn, escaped
// keys; values of the declared kind or not; white space anywhere.
func genObject(t *rapid.T, typ reflect.Type, top bool, depth int) string {
	names, types := jsonFields(typ)
	sp := func() string { return rapid.SampledFrom([]string{"", " ", "\n\t"}).Draw(t, "space") }
	var b strings.Builder
	b.WriteString(sp() + "{")
	for i := range rapid.IntRange(0, 4).Draw(t, "keys") {
		if i > 0 {
			b.WriteString(",")
		}
		key := rapid.SampledFrom(append(names, "end_turn", "colour")).Draw(t, "key")
		ft := types[key]
		switch rapid.IntRange(0, 9).Draw(t, "spelling") {
		case 0:
			key = strings.ToUpper(key[:1]) + key[1:]
		case 1:
			key = `\u0072` + key // an escape
		}
		b.WriteString(sp() + `"` + key + `"` + sp() + ":" + sp())
		b.WriteString(genValue(t, ft, depth) + sp())
	}
	b.WriteString("}")
	if top {
		b.WriteString(sp())
	}
	return b.String()
}

// genValue draws JSON text for a value of a field of type ft (nil: any).
func genValue(t *rapid.T, ft reflect.Type, depth int) string {
	if ft != nil && depth < 3 {
		st := structType(ft)
		if st == nil && ft.Kind() == reflect.Slice {
			if st = structType(ft.Elem()); st != nil && rapid.Bool().Draw(t, "array") {
				items := []string{}
				for range rapid.IntRange(0, 2).Draw(t, "items") {
					items = append(items, rapid.SampledFrom([]string{genObject(t, st, false, depth+1), "null", `"x"`}).Draw(t, "item"))
				}
				return "[" + strings.Join(items, ",") + "]"
			}
		}
		if st != nil {
			switch rapid.IntRange(0, 3).Draw(t, "struct value") {
			case 0:
				return "null"
			case 1:
				s, _ := json.Marshal(genObject(t, st, false, depth+1)) // an object as a string
				return string(s)
			default:
				return genObject(t, st, false, depth+1)
			}
		}
	}
	return rapid.SampledFrom([]string{`"a"`, `"q\"}{,["`, `12`, `-1.5e3`, `true`, `null`, `[1,{"a":"]"}]`, `{"k":[{}]}`, `"`, `{`}).Draw(t, "value")
}

// BenchmarkDecodeArgs measures decoding a model's usual spawn_agent
// arguments, against decoding them with encoding/json alone (the
// baseline, which checks no key).
func BenchmarkDecodeArgs(b *testing.B) {
	brief, _ := json.Marshal(TaskBrief{Objective: "build a calculator", Constraints: []string{"HTML + JavaScript", "static page"},
		Inputs: "numbers and operators typed by the user", Outputs: "the result on the page", CompletionCriteria: "the four operations work"})
	args := []byte(`{"roleId":"role-3","end_turn":true,"taskBrief":` + string(brief) + `}`)
	b.Run("decodeArgs", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var a spawnArgs
			if err := decodeArgs("spawn_agent", args, &a); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("baseline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var a spawnArgs
			if err := json.Unmarshal(args, &a); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzPlainArgs: whatever bytes a model sends, plainArgs does not panic,
// and arguments it finds plain need nothing of the long way.
func FuzzPlainArgs(f *testing.F) {
	for _, seed := range []string{
		`{"roleId":"role-3","end_turn":true,"taskBrief":{"objective":"o","constraints":[],"collaborators":[{"agentId":"a"}]}}`,
		`{"taskBrief":"{\"objective\":\"o\"}"}`, `{"RoleId":1}`, `{"r\u006fleId":"x"}`, `{"roleId":"a\"}"}`, `{`, `[]`, `{"budget":null}`, ``,
	} {
		f.Add([]byte(seed))
	}
	typ := reflect.TypeFor[spawnArgs]()
	f.Fuzz(func(t *testing.T, args []byte) {
		if !plainArgs(args, typ) {
			return
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(args, &obj) != nil {
			return
		}
		delete(obj, endTurnKey)
		if unwrapObjects(obj, typ) {
			t.Fatalf("plain arguments hold an object written as a string: %s", args)
		}
		if key, _ := unknownKey(obj, typ, ""); key != "" {
			t.Fatalf("plain arguments hold the unknown key %q: %s", key, args)
		}
	})
}
