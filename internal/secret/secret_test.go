package secret

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadReadsAFileOrAVariable(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	withNewline := file("pw", "s3cret\n")
	crlf := file("pw-crlf", "s3cret\r\n")
	empty := file("empty", "\n")
	t.Setenv("FG_TEST_SECRET", "from-env")
	t.Setenv("FG_TEST_EMPTY", "")
	for _, tc := range []struct {
		file, env string
		want      string
		err       string
	}{
		{"", "", "", ""},
		{withNewline, "", "s3cret", ""},
		{crlf, "", "s3cret", ""},
		{"", "FG_TEST_SECRET", "from-env", ""},
		{empty, "", "", empty + " is empty"},
		{filepath.Join(dir, "missing"), "", "", "missing"},
		{"", "FG_TEST_UNSET_VARIABLE", "", "FG_TEST_UNSET_VARIABLE is not set"},
		{"", "FG_TEST_EMPTY", "", "FG_TEST_EMPTY is empty"},
		{withNewline, "FG_TEST_SECRET", "", "give one"},
		{"/dev/zero", "", "", "not a regular file"},
	} {
		got, err := Read(tc.file, tc.env)
		if tc.err == "" && (err != nil || got != tc.want) {
			t.Errorf("Read(%q, %q) = %q, %v; want %q", tc.file, tc.env, got, err, tc.want)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("Read(%q, %q) = %q, %v; want an error containing %q", tc.file, tc.env, got, err, tc.err)
		}
	}
}
