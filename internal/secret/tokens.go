package secret

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/floodgate/floodgate/internal/safefile"
)

// Token is one bearer token of a token file and the name the logs give
// whoever presents it.
type Token struct {
	Name, Value string
}

// DefaultTokenName names the token of a file that holds one token alone.
const DefaultTokenName = "admin"

// MinTokenLength is the shortest token a token file may hold: short
// enough to paste, long enough that guessing is hopeless.
const MinTokenLength = 16

var tokenName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@-]{0,62}$`)

// ReadTokens reads a token file (admin_api.token_file): one token per line
// as NAME:TOKEN, so that the log says who made each change, or a file of
// a single line holding a token alone (with no ':'), named
// DefaultTokenName. Blank lines
// and lines starting with # are skipped. Every token must hold at least
// MinTokenLength characters, none of them a space, and names and tokens
// must not repeat. Errors name the file and the line, never the token.
func ReadTokens(file string) ([]Token, error) {
	b, err := safefile.Read(file, MaxFileBytes)
	if err != nil {
		return nil, err
	}
	var toks []Token
	bare := 0 // the line of a token given alone
	names, values := map[string]int{}, map[string]int{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		n := i + 1
		name, value, named := strings.Cut(line, ":")
		if !named {
			name, value, bare = DefaultTokenName, line, n
		}
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		switch {
		case !tokenName.MatchString(name):
			return nil, fmt.Errorf("%s:%d: the name before ':' must be 1-63 letters, digits, '.', '_', '@' or '-' (got %q)", file, n, name)
		case len(value) < MinTokenLength:
			return nil, fmt.Errorf("%s:%d: token %s holds %d characters; use at least %d", file, n, name, len(value), MinTokenLength)
		case strings.ContainsAny(value, " \t"):
			return nil, fmt.Errorf("%s:%d: token %s holds a space", file, n, name)
		}
		if j, dup := names[name]; dup {
			return nil, fmt.Errorf("%s:%d: token name %s repeats line %d", file, n, name, j)
		}
		if j, dup := values[value]; dup {
			return nil, fmt.Errorf("%s:%d: the token of %s is the token of line %d: give each its own", file, n, name, j)
		}
		names[name], values[value] = n, n
		toks = append(toks, Token{Name: name, Value: value})
	}
	if len(toks) == 0 {
		return nil, fmt.Errorf("%s holds no token (one NAME:TOKEN a line, or a single token)", file)
	}
	if len(toks) > 1 && bare > 0 {
		return nil, fmt.Errorf("%s:%d: a file of several tokens names each one (NAME:TOKEN)", file, bare)
	}
	return toks, nil
}
