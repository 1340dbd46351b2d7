// Package fielderr is the error of a setting: a problem with one value,
// named by its path ("policies[2].capacity", "addresses[1]"), and where a
// file set it. The configuration loader, the policy compiler and the Redis
// store's option check all report with it, so a problem found by a library
// reaches the user at its file and line without being translated. It lives
// on the lowest floor (limiter/) because the libraries there and above
// (limiter/redisstore, extauthz) return it from their exported API.
package fielderr

import (
	"fmt"
	"strconv"
	"strings"
)

// Error is one problem with one setting.
type Error struct {
	// File and Line say where the setting was read: "" and 0 when it was
	// not read from a file, or the line is not known.
	File string
	Line int
	// Path names the setting ("policies[2].capacity"); "" for a problem
	// with the file as a whole.
	Path string
	// Msg says what is wrong, and how to fix it.
	Msg string
	// Kind, when set, is what errors.Is finds the problem to be (a
	// library's sentinel error such as redisstore.ErrOptions).
	Kind error
}

// Error reads FILE:LINE: path: msg, leaving out what is not known.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteString(":" + strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	} else if e.Kind != nil {
		b.WriteString(e.Kind.Error() + ": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns Kind.
func (e *Error) Unwrap() error { return e.Kind }

// List is every problem found, in the order found (or sorted by the
// caller). It is an error only when it is not empty: return Err.
type List []*Error

// Error is one problem per line.
func (l List) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap exposes each problem to errors.Is and errors.As.
func (l List) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// Add appends a problem at path.
func (l *List) Add(path, format string, args ...any) {
	*l = append(*l, &Error{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// Err is l as an error: nil when it holds no problem.
func (l List) Err() error {
	if len(l) == 0 {
		return nil
	}
	return l
}

// FromYAML is the problem gopkg.in/yaml.v3 reports in msg (its error's
// text, "yaml: line N: what", or one of a TypeError's lines, "line N:
// what"), at its line of file.
func FromYAML(file, msg string) *Error {
	msg = strings.TrimPrefix(msg, "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, text, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil {
				return &Error{File: file, Line: n, Msg: text}
			}
		}
	}
	return &Error{File: file, Msg: msg}
}
