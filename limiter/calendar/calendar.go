// Package calendar cuts time into the fixed windows a calendar quota counts
// in: hours, days, weeks, months and years of the wall clock of one IANA
// time zone, weeks starting on a chosen weekday and months and years on a
// chosen day of the month.
//
// A window is [start, end) in absolute time, and the windows tile time:
// the end of one is the start of the next. The zone's rules decide what a
// day is: a day of a daylight-saving change lasts 23 or 25 hours, and a
// day whose midnight does not exist (a zone that springs forward at
// 00:00) starts at the first instant of that date, the change itself; one
// whose midnight happens twice (a zone that falls back at 01:00) starts at
// the first. An hour is an hour of the wall clock: the repeated hour of a
// fall-back is two windows, the skipped hour of a spring-forward none; an
// hour is cut where the zone's offset changes by part of an hour.
//
// Months start on the anchor day, clamped to the month's length (an anchor
// of 31 starts February's window on its last day, the 28th or the 29th);
// years start on the anchor day of January.
package calendar

import (
	"fmt"
	"time"
)

// Period is the length of a calendar's windows.
type Period uint8

// The periods, in increasing length.
const (
	Hour Period = iota + 1
	Day
	Week
	Month
	Year
)

// ParsePeriod reads a period as the configuration writes it.
func ParsePeriod(s string) (Period, error) {
	switch s {
	case "hour":
		return Hour, nil
	case "day":
		return Day, nil
	case "week":
		return Week, nil
	case "month":
		return Month, nil
	case "year":
		return Year, nil
	}
	return 0, fmt.Errorf("must be hour, day, week, month or year (got %q)", s)
}

// String names the period as the configuration writes it.
func (p Period) String() string {
	switch p {
	case Hour:
		return "hour"
	case Day:
		return "day"
	case Week:
		return "week"
	case Month:
		return "month"
	case Year:
		return "year"
	}
	return fmt.Sprintf("Period(%d)", uint8(p))
}

// Calendar is a sequence of windows of one period in one time zone. The
// zero Calendar is not valid: build one with New.
type Calendar struct {
	period Period
	loc    *time.Location
	anchor int // week: 1 = Monday … 7 = Sunday; month, year: day of the month 1-31
}

// New returns the calendar of period windows in loc (nil: UTC), anchored
// on anchor: for a week the weekday it starts on (1 = Monday … 7 =
// Sunday), for a month or a year the day of the month (1-31; 0 means 1);
// an hour or a day takes no anchor (0).
func New(period Period, loc *time.Location, anchor int) (Calendar, error) {
	if loc == nil {
		loc = time.UTC
	}
	switch period {
	case Hour, Day:
		if anchor != 0 {
			return Calendar{}, fmt.Errorf("%s has no anchor day (got %d)", map[Period]string{Hour: "an hour", Day: "a day"}[period], anchor)
		}
	case Week:
		if anchor == 0 {
			anchor = 1
		}
		if anchor < 1 || anchor > 7 {
			return Calendar{}, fmt.Errorf("a week's anchor day is a weekday, 1 = Monday to 7 = Sunday (got %d)", anchor)
		}
	case Month, Year:
		if anchor == 0 {
			anchor = 1
		}
		if anchor < 1 || anchor > 31 {
			return Calendar{}, fmt.Errorf("a %s's anchor day is a day of the month, 1 to 31 (got %d)", period, anchor)
		}
	default:
		return Calendar{}, fmt.Errorf("unknown period %v", period)
	}
	return Calendar{period: period, loc: loc, anchor: anchor}, nil
}

// Period returns the calendar's period.
func (c Calendar) Period() Period { return c.period }

// Location returns the calendar's time zone.
func (c Calendar) Location() *time.Location { return c.loc }

// Anchor returns the calendar's anchor day (0 for an hour or a day).
func (c Calendar) Anchor() int { return c.anchor }

// String describes the calendar: "month from the 15th, Europe/Berlin".
func (c Calendar) String() string {
	switch c.period {
	case Week:
		return fmt.Sprintf("week from %v, %s", time.Weekday(c.anchor%7), c.loc)
	case Month, Year:
		return fmt.Sprintf("%s from day %d, %s", c.period, c.anchor, c.loc)
	}
	return fmt.Sprintf("%s, %s", c.period, c.loc)
}

// Window returns the window holding t: start <= t < end.
func (c Calendar) Window(t time.Time) (start, end time.Time) {
	local := t.In(c.loc)
	if c.period == Hour {
		// The wall clock's hour: back to its minute 0 and on to the next,
		// cut where the zone's offset changes (a change by half an hour
		// makes a window of half an hour).
		start = local.Add(-time.Duration(local.Minute())*time.Minute - time.Duration(local.Second())*time.Second - time.Duration(local.Nanosecond()))
		end = start.Add(time.Hour)
		zs, ze := local.ZoneBounds()
		if !zs.IsZero() && start.Before(zs) {
			start = zs
		}
		if !ze.IsZero() && end.After(ze) {
			end = ze
		}
		return start.In(time.UTC), end.In(time.UTC)
	}
	y, m, d := local.Date()
	first := c.startOn(y, m, d) // the first date of t's window (at noon UTC: a date, no zone)
	start, end = c.dayStart(first), c.dayStart(c.next(first))
	if !end.After(t) {
		// A clock that fell back across midnight reads the previous date
		// again after the next day began: t is in that next day's window.
		first = c.next(first)
		start, end = end, c.dayStart(c.next(first))
	}
	return start.In(time.UTC), end.In(time.UTC)
}

// startOn returns the first date (at noon UTC, a date with no zone) of
// the window holding the date (y, m, d).
func (c Calendar) startOn(y int, m time.Month, d int) time.Time {
	date := time.Date(y, m, d, 12, 0, 0, 0, time.UTC)
	switch c.period {
	case Week:
		// days back to the anchor weekday (time.Weekday: Sunday = 0)
		back := (int(date.Weekday()) - c.anchor%7 + 7) % 7
		return date.AddDate(0, 0, -back)
	case Month:
		if s := clamp(y, m, c.anchor); d >= s {
			return time.Date(y, m, s, 12, 0, 0, 0, time.UTC)
		}
		py, pm := y, m-1
		if pm == 0 {
			py, pm = y-1, time.December
		}
		return time.Date(py, pm, clamp(py, pm, c.anchor), 12, 0, 0, 0, time.UTC)
	case Year:
		if s := time.Date(y, time.January, c.anchor, 12, 0, 0, 0, time.UTC); !date.Before(s) {
			return s
		}
		return time.Date(y-1, time.January, c.anchor, 12, 0, 0, 0, time.UTC)
	}
	return date
}

// next returns the first date of the window after the one starting on
// first.
func (c Calendar) next(first time.Time) time.Time {
	y, m, _ := first.Date()
	switch c.period {
	case Week:
		return first.AddDate(0, 0, 7)
	case Month:
		ny, nm := y, m+1
		if nm > time.December {
			ny, nm = y+1, time.January
		}
		return time.Date(ny, nm, clamp(ny, nm, c.anchor), 12, 0, 0, 0, time.UTC)
	case Year:
		return time.Date(y+1, time.January, c.anchor, 12, 0, 0, 0, time.UTC)
	}
	return first.AddDate(0, 0, 1)
}

// dayStart returns the first instant of date (a date at noon UTC, see
// startOn) in the calendar's zone: its midnight, or, when midnight does not
// exist there that day (the clock jumps from 23:59:59 to 01:00), the
// instant of the jump; when midnight happens twice, the first.
func (c Calendar) dayStart(date time.Time) time.Time {
	y, m, d := date.Date()
	t := time.Date(y, m, d, 0, 0, 0, 0, c.loc)
	if ly, lm, ld := t.Date(); ly != y || lm != m || ld != d {
		// Go chose the previous day's reading of a midnight that does not
		// exist: the day starts where that reading's zone ends.
		_, end := t.ZoneBounds()
		t = end
	} else if h, mi, s := t.Clock(); h != 0 || mi != 0 || s != 0 {
		// Go chose a reading after the gap: the day starts at the gap.
		start, _ := t.ZoneBounds()
		t = start
	}
	// A midnight that happens twice: the earlier reading, if Go chose the
	// later one (the clock went back at most a few hours).
	for _, back := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
		e := t.Add(-back)
		if ey, em, ed := e.Date(); ey == y && em == m && ed == d {
			if h, mi, s := e.Clock(); h == 0 && mi == 0 && s == 0 && e.Nanosecond() == 0 {
				t = e
			}
		}
	}
	return t
}

// clamp returns anchor, or the last day of month m of year y when that
// month is shorter.
func clamp(y int, m time.Month, anchor int) int {
	return min(anchor, daysIn(y, m))
}

// daysIn returns the number of days of month m of year y.
func daysIn(y int, m time.Month) int {
	return time.Date(y, m+1, 0, 12, 0, 0, 0, time.UTC).Day()
}
