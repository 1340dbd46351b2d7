package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mdLink is a Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestEveryDocsPageIsIndexedAndEveryLinkResolves: docs/README.md lists
// every page under docs/, and every relative link of README.md and of the
// docs names a file that exists (and, with a #fragment, a heading it has).
func TestEveryDocsPageIsIndexedAndEveryLinkResolves(t *testing.T) {
	root := filepath.Join("..", "..")
	index, err := os.ReadFile(filepath.Join(root, "docs", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages := []string{filepath.Join(root, "README.md")}
	filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			pages = append(pages, p)
		}
		return err
	})
	if len(pages) < 10 {
		t.Fatalf("found %d pages", len(pages))
	}
	for _, p := range pages {
		rel, _ := filepath.Rel(filepath.Join(root, "docs"), p)
		if !strings.HasPrefix(rel, "..") && rel != "README.md" && !strings.Contains(string(index), "("+filepath.ToSlash(rel)+")") {
			t.Errorf("docs/README.md does not list docs/%s", rel)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			dest := p
			if file != "" {
				dest = filepath.Join(filepath.Dir(p), file)
			}
			body, err := os.ReadFile(dest)
			if err != nil {
				if fi, serr := os.Stat(dest); serr == nil && fi.IsDir() {
					continue
				}
				t.Errorf("%s links to %s, which does not exist", p, target)
				continue
			}
			if frag != "" && strings.HasSuffix(dest, ".md") && !hasAnchor(string(body), frag) {
				t.Errorf("%s links to %s, whose page has no such heading", p, target)
			}
		}
	}
}

// hasAnchor reports whether a Markdown page has a heading whose GitHub
// anchor is frag: lower case, spaces as hyphens, punctuation dropped.
func hasAnchor(page, frag string) bool {
	for _, line := range strings.Split(page, "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var b strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127:
				b.WriteRune(r)
			}
		}
		if b.String() == frag {
			return true
		}
	}
	return false
}
