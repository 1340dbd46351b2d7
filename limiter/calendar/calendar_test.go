package calendar

import (
	"math/rand/v2"
	"testing"
	"time"
)

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("time zone %s: %v", name, err)
	}
	return loc
}

func mustParse(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return v
}

func TestWindow(t *testing.T) {
	cases := []struct {
		name       string
		zone       string
		period     Period
		anchor     int
		at         string
		start, end string
	}{
		{"a month from the 15th in Berlin spans the spring change", "Europe/Berlin", Month, 15, "2028-03-20T10:00:00+01:00", "2028-03-15T00:00:00+01:00", "2028-04-15T00:00:00+02:00"},
		{"the second before the 15th is the previous month's window", "Europe/Berlin", Month, 15, "2028-03-14T23:59:59+01:00", "2028-02-15T00:00:00+01:00", "2028-03-15T00:00:00+01:00"},
		{"midnight of the 15th starts the window", "Europe/Berlin", Month, 15, "2028-03-15T00:00:00+01:00", "2028-03-15T00:00:00+01:00", "2028-04-15T00:00:00+02:00"},
		{"a month from the 15th in Berlin spans the autumn change", "Europe/Berlin", Month, 15, "2028-10-20T10:00:00+01:00", "2028-10-15T00:00:00+02:00", "2028-11-15T00:00:00+01:00"},
		{"an anchor of 31 starts a leap February on the 29th", "UTC", Month, 31, "2028-02-29T12:00:00Z", "2028-02-29T00:00:00Z", "2028-03-31T00:00:00Z"},
		{"an anchor of 31 starts a common February on the 28th", "UTC", Month, 31, "2027-02-28T00:00:00Z", "2027-02-28T00:00:00Z", "2027-03-31T00:00:00Z"},
		{"an anchor of 31 ends January's window on February's last day", "UTC", Month, 31, "2028-02-28T23:59:59Z", "2028-01-31T00:00:00Z", "2028-02-29T00:00:00Z"},
		{"an anchor of 29 starts a common February on the 28th", "UTC", Month, 29, "2027-02-28T12:00:00Z", "2027-02-28T00:00:00Z", "2027-03-29T00:00:00Z"},
		{"an anchor of 29 waits for the 29th in a leap year", "UTC", Month, 29, "2028-02-28T12:00:00Z", "2028-01-29T00:00:00Z", "2028-02-29T00:00:00Z"},
		{"an anchor of 30 after a common February", "UTC", Month, 30, "2027-03-01T00:00:00Z", "2027-02-28T00:00:00Z", "2027-03-30T00:00:00Z"},
		{"an anchor of 30 in a 30-day month", "UTC", Month, 30, "2027-04-30T00:00:00Z", "2027-04-30T00:00:00Z", "2027-05-30T00:00:00Z"},
		{"a month from the 1st crosses a year", "Asia/Tokyo", Month, 1, "2027-12-31T23:59:59+09:00", "2027-12-01T00:00:00+09:00", "2028-01-01T00:00:00+09:00"},
		{"a month from the 15th crosses a year backwards", "UTC", Month, 15, "2028-01-03T00:00:00Z", "2027-12-15T00:00:00Z", "2028-01-15T00:00:00Z"},
		{"the spring day in Berlin lasts 23 hours", "Europe/Berlin", Day, 0, "2028-03-26T12:00:00+02:00", "2028-03-26T00:00:00+01:00", "2028-03-27T00:00:00+02:00"},
		{"the autumn day in Berlin lasts 25 hours", "Europe/Berlin", Day, 0, "2028-10-29T12:00:00+01:00", "2028-10-29T00:00:00+02:00", "2028-10-30T00:00:00+01:00"},
		{"a day whose midnight does not exist starts at the change", "America/Santiago", Day, 0, "2022-09-11T12:00:00-03:00", "2022-09-11T01:00:00-03:00", "2022-09-12T00:00:00-03:00"},
		{"the day before a missing midnight ends at the change", "America/Santiago", Day, 0, "2022-09-10T23:30:00-04:00", "2022-09-10T00:00:00-04:00", "2022-09-11T01:00:00-03:00"},
		{"a month whose first midnight does not exist starts at the change", "America/Santiago", Month, 11, "2022-09-20T00:00:00-03:00", "2022-09-11T01:00:00-03:00", "2022-10-11T00:00:00-03:00"},
		{"a midnight that happens twice starts the day at the first", "America/Havana", Day, 0, "2022-11-06T00:30:00-05:00", "2022-11-06T00:00:00-04:00", "2022-11-07T00:00:00-05:00"},
		{"the day before a midnight that happens twice ends at the first", "America/Havana", Day, 0, "2022-11-05T23:59:59-04:00", "2022-11-05T00:00:00-04:00", "2022-11-06T00:00:00-04:00"},
		{"a day that falls back at midnight lasts 25 hours", "America/Sao_Paulo", Day, 0, "2019-02-16T23:30:00-03:00", "2019-02-16T00:00:00-02:00", "2019-02-17T00:00:00-03:00"},
		{"the repeated hour's first pass is a window", "Europe/Berlin", Hour, 0, "2028-10-29T02:30:00+02:00", "2028-10-29T02:00:00+02:00", "2028-10-29T03:00:00+02:00"},
		{"the repeated hour's second pass is another window", "Europe/Berlin", Hour, 0, "2028-10-29T02:30:00+01:00", "2028-10-29T02:00:00+01:00", "2028-10-29T03:00:00+01:00"},
		{"the hour after the skipped one", "Europe/Berlin", Hour, 0, "2028-03-26T03:10:00+02:00", "2028-03-26T03:00:00+02:00", "2028-03-26T04:00:00+02:00"},
		{"an hour in a half-hour zone starts at its wall clock's hour", "Asia/Kolkata", Hour, 0, "2028-01-01T10:45:00+05:30", "2028-01-01T10:00:00+05:30", "2028-01-01T11:00:00+05:30"},
		{"a week from Monday", "UTC", Week, 1, "2028-03-01T09:00:00Z", "2028-02-28T00:00:00Z", "2028-03-06T00:00:00Z"},
		{"a week from Sunday", "UTC", Week, 7, "2028-03-01T09:00:00Z", "2028-02-27T00:00:00Z", "2028-03-05T00:00:00Z"},
		{"a week starts on its anchor day", "UTC", Week, 3, "2028-03-01T00:00:00Z", "2028-03-01T00:00:00Z", "2028-03-08T00:00:00Z"},
		{"a week across the spring change lasts 167 hours", "Europe/Berlin", Week, 1, "2028-03-26T12:00:00+02:00", "2028-03-20T00:00:00+01:00", "2028-03-27T00:00:00+02:00"},
		{"a leap year lasts 366 days", "UTC", Year, 1, "2028-06-01T00:00:00Z", "2028-01-01T00:00:00Z", "2029-01-01T00:00:00Z"},
		{"a year from January 15th in Berlin", "Europe/Berlin", Year, 15, "2028-01-10T00:00:00+01:00", "2027-01-15T00:00:00+01:00", "2028-01-15T00:00:00+01:00"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cal, err := New(c.period, mustLoad(t, c.zone), c.anchor)
			if err != nil {
				t.Fatal(err)
			}
			start, end := cal.Window(mustParse(t, c.at))
			if want := mustParse(t, c.start); !start.Equal(want) {
				t.Errorf("start %v, want %v", start.In(cal.Location()), want)
			}
			if want := mustParse(t, c.end); !end.Equal(want) {
				t.Errorf("end %v, want %v", end.In(cal.Location()), want)
			}
		})
	}
}

// TestWindowsTile walks every calendar of a few zones window by window
// over years of changes: each window starts where the previous one ended,
// holds the instants inside it, and lasts about its period.
func TestWindowsTile(t *testing.T) {
	zones := []string{"UTC", "Europe/Berlin", "America/Santiago", "America/Havana", "America/Sao_Paulo", "Australia/Lord_Howe", "Asia/Kolkata", "Pacific/Apia"}
	shapes := []struct {
		period   Period
		anchor   int
		min, max time.Duration
	}{
		{Hour, 0, 30 * time.Minute, 90 * time.Minute},
		{Day, 0, 22 * time.Hour, 26 * time.Hour},
		{Week, 4, 6 * 24 * time.Hour /* Samoa skipped 30 December 2011 */, 7*24*time.Hour + 2*time.Hour},
		{Month, 31, 27 * 24 * time.Hour, 32 * 24 * time.Hour},
		{Month, 15, 27 * 24 * time.Hour, 32 * 24 * time.Hour},
		{Year, 29, 364 * 24 * time.Hour, 367 * 24 * time.Hour},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	from := time.Date(2010, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, z := range zones {
		loc := mustLoad(t, z)
		for _, sh := range shapes {
			cal, err := New(sh.period, loc, sh.anchor)
			if err != nil {
				t.Fatal(err)
			}
			_, end := cal.Window(from)
			steps := 0
			for end.Before(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)) && steps < 200_000 {
				steps++
				s, e := cal.Window(end)
				if !s.Equal(end) {
					t.Fatalf("%v: the window after one ending %v starts %v", cal, end.In(loc), s.In(loc))
				}
				if l := e.Sub(s); l < sh.min || l > sh.max {
					t.Fatalf("%v: window %v to %v lasts %v", cal, s.In(loc), e.In(loc), l)
				}
				inside := s.Add(time.Duration(rng.Int64N(int64(e.Sub(s)))))
				if s2, e2 := cal.Window(inside); !s2.Equal(s) || !e2.Equal(e) {
					t.Fatalf("%v: %v is in window %v to %v, Window says %v to %v", cal, inside.In(loc), s.In(loc), e.In(loc), s2.In(loc), e2.In(loc))
				}
				if s2, _ := cal.Window(e.Add(-time.Nanosecond)); !s2.Equal(s) {
					t.Fatalf("%v: the last instant of %v to %v is in a window from %v", cal, s.In(loc), e.In(loc), s2.In(loc))
				}
				end = e
			}
			if steps < 10 {
				t.Fatalf("%v: only %d windows walked", cal, steps)
			}
		}
	}
}

func TestNewRefuses(t *testing.T) {
	cases := []struct {
		name   string
		period Period
		anchor int
	}{
		{"an anchor for an hour", Hour, 1},
		{"an anchor for a day", Day, 2},
		{"a weekday above 7", Week, 8},
		{"a negative weekday", Week, -1},
		{"a day of the month above 31", Month, 32},
		{"a day of the year's month above 31", Year, 40},
		{"no period", 0, 0},
	}
	for _, c := range cases {
		if _, err := New(c.period, nil, c.anchor); err == nil {
			t.Errorf("%s: New(%v, %d) accepted", c.name, c.period, c.anchor)
		}
	}
}

func TestParsePeriod(t *testing.T) {
	for _, p := range []Period{Hour, Day, Week, Month, Year} {
		if got, err := ParsePeriod(p.String()); err != nil || got != p {
			t.Errorf("ParsePeriod(%q) = %v, %v", p.String(), got, err)
		}
	}
	if _, err := ParsePeriod("fortnight"); err == nil {
		t.Error("ParsePeriod(fortnight) accepted")
	}
}
