package server

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Every error code the API can answer with is in docs/PROTOCOL.md's Errors
// section: the server's own (errors.go) and the tasks' (tasks/errors.go),
// read from the source, so a code added without its line fails here.
func TestErrorCodesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(doc)
	start := strings.Index(section, "\n## Errors\n")
	if start < 0 {
		t.Fatal("docs/PROTOCOL.md has no Errors section")
	}
	section = section[start+1:]
	if end := strings.Index(section[1:], "\n## "); end >= 0 {
		section = section[:end+1]
	}
	never := map[string]bool{"canceled": true} // the client went away: nobody sees it
	codes := append(codeConstants(t, "errors.go"), codeConstants(t, "../tasks/errors.go")...)
	if len(codes) < 30 {
		t.Fatalf("read only %d codes from the source: the test no longer finds them", len(codes))
	}
	for _, c := range codes {
		if !never[c] && !strings.Contains(section, "`"+c+"`") {
			t.Errorf("error code %q is not in docs/PROTOCOL.md's Errors section", c)
		}
	}
}

// codeConstants returns the values of the constants of type Code in file.
func codeConstants(t *testing.T, file string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
				continue
			}
			for _, v := range vs.Values {
				if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					s, _ := strconv.Unquote(lit.Value)
					out = append(out, s)
				}
			}
		}
	}
	return out
}
