package toolset_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportsOnlyThePublicAPI keeps the package what it sets out to show:
// tools a host could write. Its code imports the root package and the
// standard library only; agentsociety/internal, though Go would allow it
// here, is out of bounds.
func TestImportsOnlyThePublicAPI(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			first, _, _ := strings.Cut(path, "/")
			if path != "agentsociety" && (first == "agentsociety" || strings.Contains(first, ".")) {
				t.Errorf("%s imports %s: only package agentsociety and the standard library are allowed", name, path)
			}
		}
	}
}
