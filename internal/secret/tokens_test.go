package secret

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadTokensReadsNamedTokensOrOneAlone(t *testing.T) {
	dir := t.TempDir()
	file := func(content string) string {
		p := filepath.Join(dir, "tokens")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		content string
		want    string // name=value ... or the error's end
	}{
		{"0123456789abcdef\n", "admin=0123456789abcdef"},
		{"# support\nalice: aaaaaaaaaaaaaaaa1\n\nbob:bbbbbbbbbbbbbbbb2\n", "alice=aaaaaaaaaaaaaaaa1 bob=bbbbbbbbbbbbbbbb2"},
		{"alice:short\n", ":1: token alice holds 5 characters; use at least 16"},
		{"al ice:aaaaaaaaaaaaaaaa1\n", `:1: the name before ':' must be 1-63 letters, digits, '.', '_', '@' or '-' (got "al ice")`},
		{"a:aaaaaaaaaaaaaaaa1\na:bbbbbbbbbbbbbbbb2\n", ":2: token name a repeats line 1"},
		{"a:aaaaaaaaaaaaaaaa1\nb:aaaaaaaaaaaaaaaa1\n", ":2: the token of b is the token of line 1: give each its own"},
		{"a:aaaaaaaaaaaaaaaa1\nbbbbbbbbbbbbbbbb2\n", ":2: a file of several tokens names each one (NAME:TOKEN)"},
		{"# nothing\n", " holds no token (one NAME:TOKEN a line, or a single token)"},
	} {
		toks, err := ReadTokens(file(tc.content))
		var got []string
		for _, tk := range toks {
			got = append(got, tk.Name+"="+tk.Value)
		}
		if err != nil {
			if !strings.HasSuffix(err.Error(), tc.want) || strings.Contains(err.Error(), "aaaaaaaa") {
				t.Errorf("%q: got error %v, want one ending %q and naming no token", tc.content, err, tc.want)
			}
			continue
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%q: got %v, want %s", tc.content, got, tc.want)
		}
	}
}
