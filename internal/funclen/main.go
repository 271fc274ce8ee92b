// Command funclen fails when a non-test Go function (or function literal)
// is longer than -max lines, from its func line to its closing brace. It is
// part of `make lint`: a reader should see a function whole.
//
//	go run ./internal/funclen [-max 80] [dir]
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	limit := flag.Int("max", 80, "longest function allowed, in lines")
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	long, err := check(root, *limit)
	if err != nil {
		fmt.Fprintln(os.Stderr, "funclen:", err)
		os.Exit(1)
	}
	for _, l := range long {
		fmt.Println(l)
	}
	if len(long) > 0 {
		fmt.Fprintf(os.Stderr, "funclen: %d function(s) over %d lines: split them into named steps\n", len(long), *limit)
		os.Exit(1)
	}
}

// check lists "file:line: name is N lines" for every function over limit
// in the non-test .go files under root (skipping hidden directories,
// testdata and node_modules).
func check(root string, limit int) ([]string, error) {
	var long []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			name, body := funcOf(n)
			if body == nil {
				return true
			}
			start, end := fset.Position(n.Pos()), fset.Position(body.End())
			if lines := end.Line - start.Line + 1; lines > limit {
				long = append(long, fmt.Sprintf("%s:%d: %s is %d lines", p, start.Line, name, lines))
			}
			return true
		})
		return nil
	})
	return long, err
}

func funcOf(n ast.Node) (string, *ast.BlockStmt) {
	switch x := n.(type) {
	case *ast.FuncDecl:
		return x.Name.Name, x.Body
	case *ast.FuncLit:
		return "a function literal", x.Body
	}
	return "", nil
}
