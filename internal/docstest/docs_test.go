// Package docstest holds the repository's documents to its code: a test
// that a document names must exist, so that docs/INVARIANTS.md and
// docs/TESTING.md cannot go on citing a test that was renamed or removed.
package docstest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository's top directory, from this package's.
const root = "../.."

// documents are the documents whose test names are checked. BENCHMARKS.md
// is a history: it names tests as they were when a figure was measured.
var documents = []string{"README.md", "docs/INVARIANTS.md", "docs/TESTING.md", "docs/OPERATIONS.md", "docs/PROTOCOL.md", "docs/SECURITY.md"}

// cited matches a test, fuzz target or benchmark named in backquotes, with
// the package it is in when the document gives one ("nodes.TestX",
// "cmd/switchyard.TestY") and a subtest after a slash.
var cited = regexp.MustCompile("`(?:([a-z][a-z0-9/]*)\\.)?((?:Test|Fuzz|Benchmark)[A-Z][A-Za-z0-9_]*)(?:/[^`]*)?`")

var funcDecl = regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark)[A-Za-z0-9_]*)\(`)

// Every test a document names exists, in the package it names (or, named
// alone, in the package of the test named before it in the same paragraph,
// or anywhere).
func TestDocumentedTestsExist(t *testing.T) {
	where := declaredTests(t) // test name → the directories declaring it
	if len(where) < 200 {
		t.Fatalf("found only %d test functions under %s: the walk is broken", len(where), root)
	}
	checked := 0
	for _, doc := range documents {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, para := range units(string(b)) {
			pkg := ""
			for _, m := range cited.FindAllStringSubmatch(para, -1) {
				if m[1] != "" {
					pkg = m[1]
				}
				name := m[2]
				if name == "TestMain" {
					continue
				}
				checked++
				dirs, ok := where[name]
				switch {
				case !ok:
					t.Errorf("%s names %s, which no test file declares", doc, qualified(pkg, name))
				case pkg != "" && !inPackage(dirs, pkg):
					t.Errorf("%s names %s, but it is declared in %v", doc, qualified(pkg, name), dirs)
				}
			}
		}
	}
	if checked < 100 {
		t.Fatalf("checked only %d names: the pattern no longer matches how the documents cite tests", checked)
	}
}

// units splits a document into paragraphs, and a table into its rows: a
// name without a package is in the package named before it in its unit.
func units(doc string) []string {
	var out []string
	for _, para := range strings.Split(doc, "\n\n") {
		if strings.HasPrefix(para, "|") {
			out = append(out, strings.Split(para, "\n")...)
		} else {
			out = append(out, para)
		}
	}
	return out
}

// declaredTests maps each Test, Fuzz and Benchmark function of the
// repository (the load test's module included) to the directories that
// declare one by that name, relative to root.
func declaredTests(t *testing.T) map[string][]string {
	t.Helper()
	where := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		for _, m := range funcDecl.FindAllStringSubmatch(string(b), -1) {
			where[m[1]] = append(where[m[1]], filepath.ToSlash(dir))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return where
}

// inPackage reports whether one of dirs is the package a document calls
// pkg: its directory, or the last elements of it ("clustertest" is
// internal/clustertest; "loadtest" is the load test's module, any package).
func inPackage(dirs []string, pkg string) bool {
	for _, d := range dirs {
		if d == pkg || strings.HasSuffix(d, "/"+pkg) || (pkg == "loadtest" && strings.HasPrefix(d, "loadtest")) {
			return true
		}
	}
	return false
}

func qualified(pkg, name string) string {
	if pkg == "" {
		return name
	}
	return pkg + "." + name
}
