package fielderr

import (
	"errors"
	"testing"
)

func TestAnErrorSaysWhereAndWhat(t *testing.T) {
	kind := errors.New("redis options")
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{File: "f.yaml", Line: 3, Path: "policies[0].capacity", Msg: "must be > 0"}, "f.yaml:3: policies[0].capacity: must be > 0"},
		{Error{File: "f.yaml", Msg: "is empty"}, "f.yaml: is empty"},
		{Error{Path: "addresses[1]", Msg: "listed twice", Kind: kind}, "redis options: addresses[1]: listed twice"},
		{Error{Path: "headers[1]", Msg: "unknown"}, "headers[1]: unknown"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("%+v reads %q, want %q", tc.e, got, tc.want)
		}
	}
}

func TestAListIsAnErrorOnlyWhenItHoldsOne(t *testing.T) {
	var l List
	if l.Err() != nil {
		t.Fatal("an empty list is an error")
	}
	kind := errors.New("kind")
	l.Add("a", "first %d", 1)
	l = append(l, &Error{Path: "b", Msg: "second", Kind: kind})
	err := l.Err()
	var got List
	if !errors.As(err, &got) || len(got) != 2 || err.Error() != "a: first 1\nkind: b: second" {
		t.Errorf("list %v", err)
	}
	if !errors.Is(err, kind) {
		t.Error("a problem's kind is not found through the list")
	}
}
