// Package secret reads the secrets a configuration names (the identity hash
// secret, the Redis passwords) from a file or an environment variable: the
// configuration holds where a secret is, never the secret.
package secret

import (
	"fmt"
	"os"
	"strings"

	"github.com/floodgate/floodgate/internal/safefile"
)

// MaxFileBytes bounds a secret file: far more than any password or key.
const MaxFileBytes = 64 << 10

// Read returns a secret given either in a file (its content, without the
// trailing newline) or in an environment variable; at most one of file and
// env may be set, and "", nil when neither is. An unreadable file, an unset
// variable or an empty secret is an error that names its source.
func Read(file, env string) (string, error) {
	switch {
	case file != "" && env != "":
		return "", fmt.Errorf("a secret is given both in file %s and in environment variable %s; give one", file, env)
	case file != "":
		b, err := safefile.Read(file, MaxFileBytes)
		if err != nil {
			return "", err // it names the file
		}
		s := strings.TrimRight(string(b), "\r\n")
		if s == "" {
			return "", fmt.Errorf("secret file %s is empty", file)
		}
		return s, nil
	case env != "":
		s, ok := os.LookupEnv(env)
		if !ok {
			return "", fmt.Errorf("environment variable %s is not set", env)
		}
		if s == "" {
			return "", fmt.Errorf("environment variable %s is empty", env)
		}
		return s, nil
	}
	return "", nil
}
