-- The portable edition's schedule.rs: cron and interval schedules evaluated in PL/pgSQL with
-- the semantics of docs/schedules.md (those of the croner crate the native edition uses):
-- fields, names, L, W, #, ?, the + prefix, and daylight saving (a fixed-time schedule in a
-- spring-forward gap fires at the first instant after it, and once in a fall-back overlap, at
-- its first occurrence; a schedule with a wildcard, range or step in its time fields has no
-- fire time in a gap and fires in both occurrences of an overlap). Time zones are
-- PostgreSQL's own (AT TIME ZONE).
--
-- A parsed schedule is a rendezvous._cron_schedule (a type of the portable edition only);
-- every public function parses its schedule (and checks its zone) once a call.

-- A schedule parsed: `every` seconds for the interval form (the rest NULL), or the cron
-- fields as value lists (seconds, minutes, hours, months), the day of month's plain values
-- and modifiers (nW days, L, LW), the day of week's bits per weekday (index 1 = Sunday … 7:
-- 1 plain, 2..32 the 1st..5th of the month, 64 the last), whether a day field is `*`, the +
-- (both) rule, and whether the time is fixed (one second, minute and hour, no wildcard or
-- step: the daylight-saving rules differ).
CREATE TYPE rendezvous._cron_schedule AS (
    every bigint, seconds integer[], minutes integer[], hours integer[], dom integer[], dom_closest integer[],
    dom_last boolean, dom_last_weekday boolean, months integer[], dow integer[], star_dom boolean,
    star_dow boolean, dom_and_dow boolean, fixed_time boolean, never boolean
);

-- One cron field parsed as croner parses it: per value lo..hi its bits (1 plain, 2..32 the
-- 1st..5th weekday of the month, 64 the last weekday of the month, 128 the weekday nearest
-- that day), the field's enabled features (64 L, 128 with 64: LW), whether it was written
-- with a wildcard, and its last step. Which bits and features a field takes depends on kind
-- (dom: 64 and 128; dow: 2..64; the others none). Raises 22023 with the reason.
CREATE FUNCTION rendezvous._cron_field(field text, lo integer, hi integer, kind text, prefix text,
                                       OUT bits integer[], OUT enabled integer, OUT from_wildcard boolean,
                                       OUT step integer)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- Every field takes plain values and the last bit (croner's rule); dom also nW, dow #n.
    features integer := CASE kind WHEN 'dom' THEN 1 | 64 | 128 WHEN 'dow' THEN 1 | 62 | 64 ELSE 1 | 64 END;
    part text;
    clean text;
    pieces text[];
    bit integer;
    a integer;
    b integer;
BEGIN
    bits := array_fill(0, ARRAY[hi - lo + 1], ARRAY[lo]);
    enabled := 0;
    from_wildcard := false;
    step := 1;
    IF field = '*' THEN
        from_wildcard := true;
        bits := array_fill(1, ARRAY[hi - lo + 1], ARRAY[lo]);
        RETURN;
    END IF;
    FOREACH part IN ARRAY string_to_array(field, ',') LOOP
        CONTINUE WHEN part = '';
        IF part LIKE '%/%' OR part LIKE '%-%' OR (part NOT LIKE '%W%' AND part <> 'L') THEN
            IF part NOT LIKE '%/%' AND part NOT LIKE '%-%' THEN
                -- A number, maybe with #n or a trailing L (nL is n#L).
                IF part LIKE '%L' AND part NOT LIKE '%#%' THEN
                    part := replace(part, 'L', '#L');
                END IF;
                IF part LIKE '%#%' AND features & 62 = 0 THEN
                    RAISE EXCEPTION '%Nth specifier # not allowed in the current field.', prefix USING ERRCODE = '22023';
                ELSIF part LIKE '%L%' AND features & 62 = 0 THEN
                    RAISE EXCEPTION '%L not allowed in the current field.', prefix USING ERRCODE = '22023';
                END IF;
            END IF;
            -- The bit the values take: the last (…L), the nth (…#n), or plain.
            IF part LIKE '%L' THEN
                bit := 64;
            ELSIF part LIKE '%#%' THEN
                IF substr(part, strpos(part, '#') + 1) !~ '^[0-9]{1,3}$' OR substr(part, strpos(part, '#') + 1)::integer > 255 THEN
                    RAISE EXCEPTION '%Invalid nth specifier.', prefix USING ERRCODE = '22023';
                ELSIF substr(part, strpos(part, '#') + 1)::integer NOT BETWEEN 1 AND 5 THEN
                    RAISE EXCEPTION '%Nth specifier out of bounds.', prefix USING ERRCODE = '22023';
                END IF;
                bit := 1 << substr(part, strpos(part, '#') + 1)::integer;
            ELSE
                bit := 1;
            END IF;
            clean := split_part(part, '#', 1);
            IF part LIKE '%/%' THEN
                pieces := string_to_array(clean, '/');
                IF cardinality(pieces) <> 2 THEN
                    RAISE EXCEPTION '%Invalid stepped range syntax.', prefix USING ERRCODE = '22023';
                ELSIF pieces[2] !~ '^[0-9]{1,5}$' OR pieces[2]::integer > 65535 THEN
                    RAISE EXCEPTION '%Invalid step.', prefix USING ERRCODE = '22023';
                END IF;
                step := pieces[2]::integer;
                IF step = 0 THEN
                    RAISE EXCEPTION '%Step cannot be zero.', prefix USING ERRCODE = '22023';
                END IF;
                IF pieces[1] = '*' THEN
                    from_wildcard := true;
                    a := lo;
                    b := hi;
                ELSIF pieces[1] LIKE '%-%' THEN
                    IF cardinality(string_to_array(pieces[1], '-')) <> 2 THEN
                        RAISE EXCEPTION '%Invalid range syntax in stepping.', prefix USING ERRCODE = '22023';
                    ELSIF split_part(pieces[1], '-', 1) !~ '^[0-9]{1,5}$' OR split_part(pieces[1], '-', 1)::integer > 65535 THEN
                        RAISE EXCEPTION '%Invalid range start.', prefix USING ERRCODE = '22023';
                    ELSIF split_part(pieces[1], '-', 2) !~ '^[0-9]{1,5}$' OR split_part(pieces[1], '-', 2)::integer > 65535 THEN
                        RAISE EXCEPTION '%Invalid range end.', prefix USING ERRCODE = '22023';
                    END IF;
                    a := split_part(pieces[1], '-', 1)::integer;
                    b := split_part(pieces[1], '-', 2)::integer;
                ELSIF pieces[1] = '' THEN
                    RAISE EXCEPTION '%Invalid step syntax: omitting the starting point like "/%" is not allowed. Use "*/%" for wildcard steps or "X-Y/%" for range steps.', prefix,
                        pieces[2], pieces[2], pieces[2] USING ERRCODE = '22023';
                ELSE
                    RAISE EXCEPTION '%Invalid step syntax: single number steps like "%/%" are not allowed. Use "*/%" for wildcard steps or "X-Y/%" for range steps.', prefix,
                        pieces[1], pieces[2], pieces[2], pieces[2] USING ERRCODE = '22023';
                END IF;
                IF a < lo OR b > hi OR a > b THEN
                    RAISE EXCEPTION '%Range is out of bounds in stepping.', prefix USING ERRCODE = '22023';
                END IF;
            ELSIF part LIKE '%-%' THEN
                pieces := string_to_array(clean, '-');
                IF cardinality(pieces) <> 2 THEN
                    RAISE EXCEPTION '%Invalid range syntax.', prefix USING ERRCODE = '22023';
                ELSIF pieces[1] !~ '^[0-9]{1,5}$' OR pieces[1]::integer > 65535 THEN
                    RAISE EXCEPTION '%Invalid start of range.', prefix USING ERRCODE = '22023';
                ELSIF pieces[2] !~ '^[0-9]{1,5}$' OR pieces[2]::integer > 65535 THEN
                    RAISE EXCEPTION '%Invalid end of range.', prefix USING ERRCODE = '22023';
                END IF;
                a := pieces[1]::integer;
                b := pieces[2]::integer;
                IF a > b OR a < lo OR b > hi THEN
                    RAISE EXCEPTION '%Range out of bounds.', prefix USING ERRCODE = '22023';
                END IF;
            ELSE
                IF clean !~ '^[0-9]{1,5}$' OR clean::integer > 65535 THEN
                    RAISE EXCEPTION '%Invalid number.', prefix USING ERRCODE = '22023';
                ELSIF clean::integer NOT BETWEEN lo AND hi THEN
                    RAISE EXCEPTION '%Number out of bounds.', prefix USING ERRCODE = '22023';
                END IF;
                a := clean::integer;
                b := a;
            END IF;
            IF features & bit <> bit THEN
                RAISE EXCEPTION '%Bit 0b% is not supported by the current features 0b%.', prefix, bit::bit(8), features::bit(8)
                    USING ERRCODE = '22023';
            END IF;
            FOR v IN a .. b BY CASE WHEN part LIKE '%/%' THEN step ELSE 1 END LOOP
                bits[v] := bits[v] | bit;
            END LOOP;
        ELSIF part LIKE '%W%' THEN
            -- nW: the weekday nearest day n; LW: the last weekday of the month.
            IF split_part(part, 'W', 1) = 'L' THEN
                IF features & 128 = 0 THEN
                    RAISE EXCEPTION '%Feature 0b10000000 is not supported by the current features 0b%.', prefix, features::bit(8)
                        USING ERRCODE = '22023';
                END IF;
                enabled := enabled | 64 | 128;
            ELSIF split_part(part, 'W', 1) !~ '^[0-9]{1,5}$' OR split_part(part, 'W', 1)::integer > 65535 THEN
                RAISE EXCEPTION '%Invalid day for closest weekday.', prefix USING ERRCODE = '22023';
            ELSIF split_part(part, 'W', 1)::integer NOT BETWEEN lo AND hi THEN
                RAISE EXCEPTION '%Day for closest weekday out of bounds.', prefix USING ERRCODE = '22023';
            ELSIF features & 128 = 0 THEN
                RAISE EXCEPTION '%Bit 0b10000000 is not supported by the current features 0b%.', prefix, features::bit(8)
                    USING ERRCODE = '22023';
            ELSE
                bits[split_part(part, 'W', 1)::integer] := bits[split_part(part, 'W', 1)::integer] | 128;
            END IF;
        ELSE
            -- L alone: the last day of the month (a feature the other fields accept and ignore).
            enabled := enabled | 64;
        END IF;
    END LOOP;
END
$$;

-- A schedule parsed, its zone checked: 22004 for NULL, 22023 for what is not valid, with the
-- native edition's messages (croner's reasons).
CREATE FUNCTION rendezvous._cron_parse(schedule text, time_zone text) RETURNS rendezvous._cron_schedule
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r rendezvous._cron_schedule;
    text_ text;
    lower_ text;
    rest text;
    p text;
    parts text[];
    n numeric;
    unit_seconds integer;
    f record;
    bad text;
    fixed_fields integer := 0;
    prefix text;
    names text[] := ARRAY['-SUN', '-7', 'SUN', '0', 'MON', '1', 'TUE', '2', 'WED', '3', 'THU', '4', 'FRI', '5',
                          'SAT', '6', 'JAN', '1', 'FEB', '2', 'MAR', '3', 'APR', '4', 'MAY', '5', 'JUN', '6',
                          'JUL', '7', 'AUG', '8', 'SEP', '9', 'OCT', '10', 'NOV', '11', 'DEC', '12'];
BEGIN
    IF schedule IS NULL THEN
        RAISE EXCEPTION 'schedule must not be NULL' USING ERRCODE = '22004';
    ELSIF time_zone IS NULL THEN
        RAISE EXCEPTION 'time_zone must not be NULL' USING ERRCODE = '22004';
    END IF;
    text_ := btrim(schedule, E' \t\n\r\f\v');
    IF text_ = '' THEN
        RAISE EXCEPTION 'schedule must not be empty' USING ERRCODE = '22023';
    ELSIF octet_length(text_) > 1024 THEN
        RAISE EXCEPTION 'schedule is % bytes long; the limit is 1024', octet_length(text_) USING ERRCODE = '22023';
    END IF;
    lower_ := lower(text_);
    IF lower_ LIKE 'every %' THEN
        rest := btrim(substr(lower_, 7), E' \t\n\r\f\v');
        parts := regexp_split_to_array(rest, E'[ \t\n\r\f\v]+');
        unit_seconds := CASE WHEN cardinality(parts) <> 2 THEN NULL
                             WHEN parts[2] IN ('second', 'seconds', 'sec', 'secs', 's') THEN 1
                             WHEN parts[2] IN ('minute', 'minutes', 'min', 'mins', 'm') THEN 60
                             WHEN parts[2] IN ('hour', 'hours', 'h') THEN 3600
                             WHEN parts[2] IN ('day', 'days', 'd') THEN 86400 END;
        IF unit_seconds IS NULL OR parts[1] !~ '^[+-]?[0-9]{1,19}$' THEN
            RAISE EXCEPTION 'schedule "every %" is not valid: write every <n> seconds|minutes|hours|days, for example every 30 seconds',
                rest USING ERRCODE = '22023';
        END IF;
        n := parts[1]::numeric * unit_seconds;
        IF n NOT BETWEEN 1 AND 366 * 86400 THEN
            RAISE EXCEPTION 'schedule "every %": the interval must be between 1 second and 366 days', rest
                USING ERRCODE = '22023';
        END IF;
        r.every := n::bigint;
        PERFORM rendezvous._check_zone(time_zone);
        RETURN r;
    END IF;
    IF left(text_, 1) <> '@' AND cardinality(regexp_split_to_array(text_, E'[ \t\n\r\f\v]+')) NOT IN (5, 6) THEN
        RAISE EXCEPTION 'schedule "%" has % fields: a cron schedule has 5 (minute hour day-of-month month day-of-week) or 6 (seconds first)',
            text_, cardinality(regexp_split_to_array(text_, E'[ \t\n\r\f\v]+')) USING ERRCODE = '22023';
    END IF;
    prefix := format('schedule "%s" is not valid: ', text_);
    p := upper(text_);
    IF p LIKE '%@%' THEN
        p := CASE p WHEN '@YEARLY' THEN '0 0 1 1 *' WHEN '@ANNUALLY' THEN '0 0 1 1 *' WHEN '@MONTHLY' THEN '0 0 1 * *'
                    WHEN '@WEEKLY' THEN '0 0 * * SUN' WHEN '@DAILY' THEN '0 0 * * *' WHEN '@HOURLY' THEN '0 * * * *'
                    ELSE p END;
    END IF;
    -- Names as croner replaces them: weekdays, then months, anywhere in the text.
    IF p ~ '[A-KM-VX-Z]' THEN
        FOR i IN 1 .. cardinality(names) / 2 LOOP
            p := replace(p, names[2 * i - 1], names[2 * i]);
        END LOOP;
    END IF;
    parts := regexp_split_to_array(p, E'[ \t\n\r\f\v]+');
    IF cardinality(parts) = 5 THEN
        parts := array_prepend('0'::text, parts);
    END IF;
    IF cardinality(parts) = 6 THEN
        parts := array_append(parts, '*'::text);
    END IF;
    IF cardinality(parts) <> 7 THEN
        RAISE EXCEPTION '%Invalid pattern: Pattern must have between 5 and 7 fields.', prefix USING ERRCODE = '22023';
    END IF;
    parts[4] := replace(parts[4], '?', '*');
    parts[6] := replace(parts[6], '?', '*');
    r.dom_and_dow := left(parts[6], 1) = '+';
    IF r.dom_and_dow THEN
        parts[6] := substr(parts[6], 2);
    END IF;
    FOR i IN 1 .. 7 LOOP
        bad := substring(parts[i] FROM (CASE i WHEN 4 THEN '[^*/0-9,LW?-]' WHEN 6 THEN '[^*/0-9,#L?-]' ELSE '[^*/0-9,-]' END));
        IF bad IS NOT NULL THEN
            RAISE EXCEPTION '%Pattern contains illegal characters: CronPattern contains illegal character ''%'' in part ''%''',
                prefix, bad, parts[i] USING ERRCODE = '22023';
        END IF;
    END LOOP;
    r.star_dom := parts[4] = '*';
    r.star_dow := parts[6] = '*';
    f := rendezvous._cron_field(parts[1], 0, 59, 'second', prefix || 'Component error: ');
    r.seconds := ARRAY(SELECT v FROM generate_series(0, 59) v WHERE f.bits[v] & 1 = 1);
    fixed_fields := fixed_fields + (f.step = 1 AND NOT f.from_wildcard AND cardinality(r.seconds) = 1)::integer;
    f := rendezvous._cron_field(parts[2], 0, 59, 'minute', prefix || 'Component error: ');
    r.minutes := ARRAY(SELECT v FROM generate_series(0, 59) v WHERE f.bits[v] & 1 = 1);
    fixed_fields := fixed_fields + (f.step = 1 AND NOT f.from_wildcard AND cardinality(r.minutes) = 1)::integer;
    f := rendezvous._cron_field(parts[3], 0, 23, 'hour', prefix || 'Component error: ');
    r.hours := ARRAY(SELECT v FROM generate_series(0, 23) v WHERE f.bits[v] & 1 = 1);
    fixed_fields := fixed_fields + (f.step = 1 AND NOT f.from_wildcard AND cardinality(r.hours) = 1)::integer;
    r.fixed_time := fixed_fields = 3;
    f := rendezvous._cron_field(parts[4], 1, 31, 'dom', prefix || 'Component error: ');
    r.dom := ARRAY(SELECT v FROM generate_series(1, 31) v WHERE f.bits[v] & 1 = 1);
    r.dom_closest := ARRAY(SELECT v FROM generate_series(1, 31) v WHERE f.bits[v] & 128 = 128);
    r.dom_last := f.enabled & 64 = 64;
    r.dom_last_weekday := f.enabled & 128 = 128;
    f := rendezvous._cron_field(parts[5], 1, 12, 'month', prefix || 'Component error: ');
    r.months := ARRAY(SELECT v FROM generate_series(1, 12) v WHERE f.bits[v] & 1 = 1);
    f := rendezvous._cron_field(parts[6], 0, 7, 'dow', prefix || 'Component error: ');
    -- 7 is Sunday too.
    r.dow := ARRAY(SELECT f.bits[v] | CASE WHEN v = 0 THEN f.bits[7] ELSE 0 END FROM generate_series(0, 6) v);
    r.never := rendezvous._cron_never(r);
    PERFORM rendezvous._check_zone(time_zone);
    RETURN r;
END
$$;

-- _cron_parse, kept for the session: the parsed schedule is stored in a custom setting named
-- by a hash of the schedule and zone, so making a second's firings parses each distinct
-- schedule once a session (as the native edition keeps parsed schedules per backend) instead
-- of once a task. Only what parsed is kept; a transaction that rolls back forgets its own.
-- The caller may SET any custom setting of its session, so what is kept carries a MAC under
-- the install's key (_cron_key, the owner's alone) and is trusted only if the MAC holds:
-- 0.3.0 trusted it, and a host planted another schedule for a task that the owner's code then
-- planned (#39). Code that cannot read the key (a caller's own fire_times) parses every call.
CREATE FUNCTION rendezvous._cron_parsed(schedule text, time_zone text) RETURNS rendezvous._cron_schedule
LANGUAGE plpgsql STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    name text := 'rendezvous_cron.p' || md5(coalesce(schedule, '') || E'\x01' || coalesce(time_zone, ''));
    kept text := current_setting(name, true);
    mac_key bytea;
    -- What the MAC covers besides the value: the setting's name, the schedule and the zone.
    parsed text := name || E'\x01' || coalesce(schedule, '') || E'\x01' || coalesce(time_zone, '') || E'\x01';
    s rendezvous._cron_schedule;
BEGIN
    IF NOT has_table_privilege('rendezvous._cron_key', 'SELECT') THEN
        RETURN rendezvous._cron_parse(schedule, time_zone);
    END IF;
    SELECT k.key INTO mac_key FROM rendezvous._cron_key k;
    IF kept IS NOT NULL AND kept <> ''
       AND left(kept, 64) = rendezvous._mac(mac_key, parsed || substr(kept, 66)) THEN
        RETURN substr(kept, 66)::rendezvous._cron_schedule;
    END IF;
    s := rendezvous._cron_parse(schedule, time_zone);
    -- (Setting a parameter is not allowed in a parallel query: the functions that parse are
    -- PARALLEL UNSAFE here, PARALLEL SAFE in the native edition.)
    PERFORM set_config(name, rendezvous._mac(mac_key, parsed || s::text) || ':' || s::text, false);
    RETURN s;
END
$$;

-- Whether a date matches the day fields (day of month, month, day of week with their
-- modifiers; the classic either-or rule unless a field is * or the + prefix asks for both).
CREATE FUNCTION rendezvous._cron_day_match(months integer[], dom integer[], dom_closest integer[], dom_last boolean,
                                           dom_last_weekday boolean, dow integer[], star_dom boolean,
                                           star_dow boolean, dom_and_dow boolean, d date) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    day_ integer := extract(day FROM d)::integer;
    weekday integer := extract(dow FROM d)::integer;
    month_length integer := extract(day FROM (date_trunc('month', d) + interval '1 month - 1 day'))::integer;
    last_wd integer;
    day_matches boolean;
    dow_matches boolean := false;
    target integer;
    pwd integer;
    bits integer := dow[weekday + 1];
BEGIN
    IF NOT extract(month FROM d)::integer = ANY (months) OR extract(year FROM d) NOT BETWEEN 1 AND 5000 THEN
        RETURN false;
    END IF;
    day_matches := day_ = ANY (dom);
    IF NOT day_matches AND dom_last AND dom_last_weekday THEN
        -- LW: the last weekday (Monday to Friday) of the month.
        last_wd := (weekday + (month_length - day_)) % 7;
        day_matches := day_ = CASE last_wd WHEN 6 THEN month_length - 1 WHEN 0 THEN month_length - 2 ELSE month_length END;
    ELSIF NOT day_matches AND dom_last AND NOT dom_last_weekday THEN
        day_matches := day_ = month_length;
    END IF;
    IF NOT day_matches AND cardinality(dom_closest) > 0 THEN
        -- nW: the weekday nearest day n, within the month.
        FOR pd IN greatest(day_ - 2, 1) .. least(day_ + 2, month_length) LOOP
            CONTINUE WHEN NOT pd = ANY (dom_closest);
            pwd := ((weekday + (pd - day_)) % 7 + 7) % 7;
            target := CASE WHEN pwd BETWEEN 1 AND 5 THEN pd
                           WHEN pwd = 6 AND pd > 1 THEN pd - 1
                           WHEN pwd = 6 THEN pd + 2
                           WHEN pd < month_length THEN pd + 1
                           ELSE pd - 2 END;
            IF target = day_ THEN
                day_matches := true;
                EXIT;
            END IF;
        END LOOP;
    END IF;
    IF (day_ - 1) / 7 <= 4 THEN
        dow_matches := bits & (1 << ((day_ - 1) / 7 + 1)) <> 0;
    END IF;
    dow_matches := dow_matches OR (bits & 64 <> 0 AND day_ + 7 > month_length) OR bits & 1 <> 0;
    IF (day_matches AND star_dow) OR (dow_matches AND star_dom) THEN
        RETURN true;
    ELSIF NOT star_dom AND NOT star_dow THEN
        RETURN CASE WHEN dom_and_dow THEN day_matches AND dow_matches ELSE day_matches OR dow_matches END;
    END IF;
    RETURN false;
END
$$;

-- Whether a pattern can match nothing: a field with no value, or day-of-month values only
-- (no day of week) none of which any of its months has (0 0 30 2 *). Spares a search to the
-- year 5000.
CREATE FUNCTION rendezvous._cron_never(s rendezvous._cron_schedule) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN cardinality(s.seconds) = 0 OR cardinality(s.minutes) = 0 OR cardinality(s.hours) = 0
        OR cardinality(s.months) = 0
        OR (NOT s.star_dom AND s.star_dow AND cardinality(s.dom_closest) = 0 AND NOT s.dom_last
            AND NOT EXISTS (SELECT 1 FROM unnest(s.months) m, unnest(s.dom) d
                             WHERE d <= CASE WHEN m = 2 THEN 29 WHEN m IN (4, 6, 9, 11) THEN 30 ELSE 31 END));
END
$$;

-- The first wall-clock time at or after local (whole seconds) whose fields all match, forward
-- (back = false), or the last at or before it (back = true); NULL past the year 5000 or
-- before the year 1.
CREATE FUNCTION rendezvous._cron_local(s rendezvous._cron_schedule, local timestamp, back boolean) RETURNS timestamp
LANGUAGE plpgsql STRICT IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d date := local::date;
    t integer := extract(epoch FROM local::time)::integer;   -- seconds of the day
    hh integer;
    mm integer;
    ss integer;
    h integer;
    m integer;
    x integer;
    days integer := 0;
BEGIN
    -- A schedule that never fires, and anything that is not a parsed schedule (NULL, or a
    -- value not made by _cron_parse: its never unknown), has no fire time: no search.
    IF s.never IS NOT FALSE THEN
        RETURN NULL;
    END IF;
    LOOP
        IF extract(year FROM d) > 5000 OR extract(year FROM d) < 1 THEN
            RETURN NULL;
        END IF;
        days := days + 1;
        IF days % 1024 = 0 THEN
            PERFORM pg_catalog.pg_sleep(0);   -- an interrupt check: a cancel stops the search
        END IF;
        IF rendezvous._cron_day_match(s.months, s.dom, s.dom_closest, s.dom_last, s.dom_last_weekday, s.dow,
                                      s.star_dom, s.star_dow, s.dom_and_dow, d) THEN
            hh := t / 3600;
            mm := t / 60 % 60;
            ss := t % 60;
            IF NOT back THEN
                -- Same hour and minute, a later second; same hour, a later minute; a later hour.
                IF hh = ANY (s.hours) AND mm = ANY (s.minutes) THEN
                    SELECT min(v) INTO x FROM unnest(s.seconds) v WHERE v >= ss;
                    IF x IS NOT NULL THEN
                        RETURN d + make_interval(hours => hh, mins => mm, secs => x);
                    END IF;
                END IF;
                IF hh = ANY (s.hours) THEN
                    SELECT min(v) INTO m FROM unnest(s.minutes) v WHERE v > mm;
                    IF m IS NOT NULL THEN
                        RETURN d + make_interval(hours => hh, mins => m, secs => (SELECT min(v) FROM unnest(s.seconds) v));
                    END IF;
                END IF;
                SELECT min(v) INTO h FROM unnest(s.hours) v WHERE v > hh;
                IF h IS NOT NULL THEN
                    RETURN d + make_interval(hours => h, mins => (SELECT min(v) FROM unnest(s.minutes) v),
                                             secs => (SELECT min(v) FROM unnest(s.seconds) v));
                END IF;
            ELSE
                IF hh = ANY (s.hours) AND mm = ANY (s.minutes) THEN
                    SELECT max(v) INTO x FROM unnest(s.seconds) v WHERE v <= ss;
                    IF x IS NOT NULL THEN
                        RETURN d + make_interval(hours => hh, mins => mm, secs => x);
                    END IF;
                END IF;
                IF hh = ANY (s.hours) THEN
                    SELECT max(v) INTO m FROM unnest(s.minutes) v WHERE v < mm;
                    IF m IS NOT NULL THEN
                        RETURN d + make_interval(hours => hh, mins => m, secs => (SELECT max(v) FROM unnest(s.seconds) v));
                    END IF;
                END IF;
                SELECT max(v) INTO h FROM unnest(s.hours) v WHERE v < hh;
                IF h IS NOT NULL THEN
                    RETURN d + make_interval(hours => h, mins => (SELECT max(v) FROM unnest(s.minutes) v),
                                             secs => (SELECT max(v) FROM unnest(s.seconds) v));
                END IF;
            END IF;
        END IF;
        IF NOT back THEN
            d := d + 1;
            t := 0;
        ELSE
            d := d - 1;
            t := 86399;
        END IF;
    END LOOP;
    RETURN NULL;   -- (the loop only ends by returning)
END
$$;

-- The instants a wall-clock time names in a zone: one; two in a fall-back overlap (earlier,
-- later); none in a spring-forward gap.
CREATE FUNCTION rendezvous._cron_instants(local timestamp, zone text) RETURNS timestamptz[]
LANGUAGE plpgsql STRICT STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    guess timestamptz := local AT TIME ZONE zone;
    before_ interval;
    after_ interval;
    out_ timestamptz[] := '{}'::timestamptz[];
    c timestamptz;
BEGIN
    IF zone = 'UTC' THEN
        RETURN ARRAY[guess];
    END IF;
    before_ := ((guess - interval '12 hours') AT TIME ZONE zone) - ((guess - interval '12 hours') AT TIME ZONE 'UTC');
    after_ := ((guess + interval '12 hours') AT TIME ZONE zone) - ((guess + interval '12 hours') AT TIME ZONE 'UTC');
    IF before_ = after_ THEN
        RETURN ARRAY[guess];   -- no clock change within half a day: one instant
    END IF;
    -- Each offset in force around it that gives back this wall-clock time names an instant.
    FOREACH c IN ARRAY ARRAY[(local - before_) AT TIME ZONE 'UTC', (local - after_) AT TIME ZONE 'UTC'] LOOP
        IF (c AT TIME ZONE zone) = local AND NOT c = ANY (out_) THEN
            out_ := out_ || c;
        END IF;
    END LOOP;
    RETURN ARRAY(SELECT x FROM unnest(out_) x ORDER BY x);
END
$$;

-- The instant a zone's clock changes between lo and hi (at most one change between them): the
-- first whole second from which the UTC offset is hi's.
CREATE FUNCTION rendezvous._zone_change(lo timestamptz, hi timestamptz, zone text) RETURNS timestamptz
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    hi_offset interval := (hi AT TIME ZONE zone) - (hi AT TIME ZONE 'UTC');
    mid timestamptz;
BEGIN
    lo := date_trunc('second', lo);
    hi := date_trunc('second', hi);
    WHILE hi - lo > interval '1 second' LOOP
        mid := lo + date_trunc('second', (hi - lo) / 2);
        IF (mid AT TIME ZONE zone) - (mid AT TIME ZONE 'UTC') = hi_offset THEN
            hi := mid;
        ELSE
            lo := mid;
        END IF;
    END LOOP;
    RETURN hi;
END
$$;

-- The instants at which a wall-clock time the schedule matches fires: a fixed-time schedule
-- at the earlier of an overlap's two, and at the first instant after a gap its time falls
-- into (if that day still matches); any other schedule at every instant the time names (none
-- in a gap).
CREATE FUNCTION rendezvous._cron_fires(s rendezvous._cron_schedule, zone text, local timestamp) RETURNS timestamptz[]
LANGUAGE plpgsql STRICT STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    instants timestamptz[] := rendezvous._cron_instants(local, zone);
    guess timestamptz;
    c timestamptz;
BEGIN
    IF NOT s.fixed_time THEN
        RETURN instants;
    ELSIF cardinality(instants) > 0 THEN
        RETURN instants[1:1];
    END IF;
    guess := local AT TIME ZONE zone;
    c := rendezvous._zone_change(guess - interval '12 hours', guess + interval '12 hours', zone);
    IF rendezvous._cron_day_match(s.months, s.dom, s.dom_closest, s.dom_last, s.dom_last_weekday, s.dow,
                                  s.star_dom, s.star_dow, s.dom_and_dow, (c AT TIME ZONE zone)::date) THEN
        RETURN ARRAY[c];
    END IF;
    RETURN '{}'::timestamptz[];
END
$$;

-- One walk of croner's search: the first matching wall-clock time from `local` on (inclusive)
-- that fires at an instant not behind `origin` (more than a second before it), in search
-- order.
CREATE FUNCTION rendezvous._cron_walk(s rendezvous._cron_schedule, zone text, local timestamp, origin timestamptz) RETURNS timestamptz
LANGUAGE plpgsql STRICT STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c timestamptz;
BEGIN
    LOOP
        local := rendezvous._cron_local(s, local, false);
        IF local IS NULL THEN
            RETURN NULL;
        END IF;
        FOREACH c IN ARRAY rendezvous._cron_fires(s, zone, local) LOOP
            IF c + interval '1 second' > origin THEN
                RETURN c;
            END IF;
        END LOOP;
        local := local + interval '1 second';
    END LOOP;
    RETURN NULL;   -- (the loop only ends by returning)
END
$$;

-- The first fire time strictly after `after` of a parsed schedule in a zone (NULL: none
-- before the year 5000); with back, the last at or before it.
CREATE FUNCTION rendezvous._cron_next(s rendezvous._cron_schedule, zone text, after timestamptz, back boolean DEFAULT false)
RETURNS timestamptz
LANGUAGE plpgsql STRICT STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    local timestamp := date_trunc('second', after AT TIME ZONE zone);
    margin interval := interval '3 hours';   -- more than any zone's clock change
    here timestamptz[];
    edge timestamptz;
    found_ timestamptz;
    other timestamptz;
    c timestamptz;
    best timestamptz;
    t bigint;
BEGIN
    IF s.every IS NOT NULL THEN
        t := floor(extract(epoch FROM after))::bigint;
        t := t - ((t % s.every) + s.every) % s.every;
        RETURN to_timestamp(CASE WHEN back THEN t ELSE t + s.every END);
    END IF;
    IF NOT back THEN
        found_ := rendezvous._cron_walk(s, zone, local + interval '1 second', after);
        -- Starting on the earlier half of an overlap, the later half (wall-clock times already
        -- passed) lies ahead too: walk it from its edge, keep the nearer.
        IF s.fixed_time OR zone = 'UTC' THEN
            RETURN found_;
        END IF;
        here := rendezvous._cron_instants(local, zone);
        IF cardinality(here) <> 2 OR after >= here[2] THEN
            RETURN found_;
        END IF;
        edge := rendezvous._zone_change(after, here[2], zone);
        IF found_ < edge THEN
            RETURN found_;
        END IF;
        other := rendezvous._cron_walk(s, zone, edge AT TIME ZONE zone, edge);
        RETURN CASE WHEN found_ IS NULL OR other < found_ THEN other ELSE found_ END;
    END IF;
    -- Back (only after a gap of more than 100,000 fire times): every matching wall-clock time
    -- from a little after `after`'s, keeping the latest instant at or before it, until no
    -- earlier wall-clock time can give a later one.
    local := local + margin;
    LOOP
        local := rendezvous._cron_local(s, local, true);
        IF local IS NULL OR (best IS NOT NULL AND local < (best AT TIME ZONE zone) - margin) THEN
            RETURN best;
        END IF;
        FOREACH c IN ARRAY rendezvous._cron_fires(s, zone, local) LOOP
            IF c <= after AND (best IS NULL OR c > best) THEN
                best := c;
            END IF;
        END LOOP;
        local := local - interval '1 second';
    END LOOP;
    RETURN NULL;   -- (the loop only ends by returning)
END
$$;

-- A time zone of the system's zoneinfo, as the native edition reads them (22023 otherwise):
-- names PostgreSQL lists in pg_timezone_names, in any case (no POSIX offsets such as UTC+3).
-- Without an exception block, so it runs in a parallel worker too.
CREATE FUNCTION rendezvous._check_zone(time_zone text) RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM rendezvous._check_text('time_zone', time_zone, 64);
    IF time_zone <> 'UTC'
          AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names z WHERE lower(z.name) = lower(time_zone)) THEN
        RAISE EXCEPTION 'unknown time zone "%" (use an IANA name such as Europe/Berlin)', time_zone USING ERRCODE = '22023';
    END IF;
END
$$;

-- An instant as the native edition's messages print it: RFC 3339 in UTC, the fraction of a
-- second only when there is one (2026-01-01T00:00:00Z, 2026-01-01T00:00:00.25Z).
CREATE FUNCTION rendezvous._rfc3339(at timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
           || coalesce('.' || nullif(rtrim(to_char(at AT TIME ZONE 'UTC', 'US'), '0'), ''), '') || 'Z'
$$;

-- A bound of a schedule call: finite and within the years schedules cover.
CREATE FUNCTION rendezvous._schedule_bound(name text, at timestamptz) RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF at IS NULL THEN
        RAISE EXCEPTION '% must not be NULL', name USING ERRCODE = '22004';
    ELSIF NOT isfinite(at) THEN
        RAISE EXCEPTION '% must be finite', name USING ERRCODE = '22023';
    END IF;
    RETURN at;
END
$$;

CREATE FUNCTION rendezvous.fire_times(schedule text, time_zone text, after timestamp with time zone,
                                      until timestamp with time zone)
RETURNS SETOF timestamp with time zone
LANGUAGE plpgsql STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s rendezvous._cron_schedule := rendezvous._cron_parsed(schedule, time_zone);
    cursor_ timestamptz := rendezvous._schedule_bound('after', after);
    until_ timestamptz := rendezvous._schedule_bound('until', until);
    found_ integer := 0;
BEGIN
    LOOP
        cursor_ := rendezvous._cron_next(s, time_zone, cursor_);
        EXIT WHEN cursor_ IS NULL OR cursor_ > until_;
        found_ := found_ + 1;
        IF found_ > 100000 THEN
            RAISE EXCEPTION 'more than 100000 fire times between % and %; ask for a shorter range',
                rendezvous._rfc3339(after), rendezvous._rfc3339(until) USING ERRCODE = '54000';
        END IF;
        RETURN NEXT cursor_;
    END LOOP;
END
$$;

CREATE FUNCTION rendezvous._check_schedule(schedule text, time_zone text, after timestamp with time zone)
RETURNS timestamp with time zone
LANGUAGE plpgsql STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s rendezvous._cron_schedule := rendezvous._cron_parsed(schedule, time_zone);
    next_ timestamptz := rendezvous._cron_next(s, time_zone, rendezvous._schedule_bound('after', after));
BEGIN
    IF next_ IS NULL THEN
        RAISE EXCEPTION 'schedule "%" never fires again (no fire time before the year 5000)',
            btrim(schedule, E' \t\n\r\f\v') USING ERRCODE = '22023';
    END IF;
    RETURN next_;
END
$$;

CREATE FUNCTION rendezvous._next_fire_time(schedule text, time_zone text, after timestamp with time zone)
RETURNS timestamp with time zone
LANGUAGE plpgsql STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN rendezvous._cron_next(rendezvous._cron_parsed(schedule, time_zone), time_zone,
                                 rendezvous._schedule_bound('after', after), false);
END
$$;

-- One task's catch-up decision (schedule.rs's plan): of the fire times in [from, now], which
-- become firings now, how many are skipped, and the next fire time after this pass.
CREATE FUNCTION rendezvous._plan_task(schedule text, time_zone text, catch_up text, catch_up_window interval,
                                      from_ timestamp with time zone, now_ timestamp with time zone, max_run integer)
RETURNS TABLE (run_at timestamp with time zone[], skipped bigint, next_fire_at timestamp with time zone)
LANGUAGE plpgsql STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s rendezvous._cron_schedule := rendezvous._cron_parsed(schedule, time_zone);
    window_start timestamptz;
    just_before_from timestamptz := from_ - interval '1 microsecond';
    first_ timestamptz;
    cursor_ timestamptz;
    run timestamptz[] := '{}'::timestamptz[];
    more boolean := false;
    due bigint := 0::bigint;
    latest timestamptz;
    next_ timestamptz;
    skipped_ bigint := 0::bigint;
    limit_ integer := least(greatest(coalesce(max_run, 1), 1), 1000);
BEGIN
    PERFORM rendezvous._schedule_bound('from', from_);
    PERFORM rendezvous._schedule_bound('now', now_);
    window_start := now_ - catch_up_window;
    IF catch_up = 'all' THEN
        first_ := greatest(window_start, just_before_from);
        cursor_ := first_;
        LOOP
            cursor_ := rendezvous._cron_next(s, time_zone, cursor_);
            EXIT WHEN cursor_ IS NULL OR cursor_ > now_;
            IF cardinality(run) = limit_ THEN
                more := true;
                EXIT;
            END IF;
            run := run || cursor_;
        END LOOP;
        IF first_ > just_before_from THEN
            cursor_ := just_before_from;
            LOOP
                cursor_ := rendezvous._cron_next(s, time_zone, cursor_);
                EXIT WHEN cursor_ IS NULL OR cursor_ > first_;
                skipped_ := skipped_ + 1;
                IF skipped_ > 100000 THEN
                    skipped_ := 100000;
                    EXIT;
                END IF;
            END LOOP;
        END IF;
        next_ := rendezvous._cron_next(s, time_zone, CASE WHEN more THEN run[cardinality(run)] ELSE now_ END);
        RETURN QUERY SELECT run, skipped_, next_;
    ELSIF catch_up IN ('latest', 'skip') THEN
        cursor_ := just_before_from;
        LOOP
            cursor_ := rendezvous._cron_next(s, time_zone, cursor_);
            IF cursor_ IS NULL OR cursor_ > now_ THEN
                next_ := cursor_;
                EXIT;
            END IF;
            IF due = 100000 THEN
                -- After a long gap: count to the cap, and search back for the latest.
                latest := rendezvous._cron_next(s, time_zone, now_, true);
                IF latest < from_ THEN
                    latest := NULL;
                END IF;
                next_ := rendezvous._cron_next(s, time_zone, now_);
                EXIT;
            END IF;
            due := due + 1;
            latest := cursor_;
        END LOOP;
        IF latest IS NOT NULL AND (catch_up = 'latest' OR latest >= window_start) THEN
            run := ARRAY[latest];
        END IF;
        RETURN QUERY SELECT run, greatest(due - cardinality(run), 0), next_;
    ELSE
        RAISE EXCEPTION 'catch_up must be latest, all or skip (got "%")', catch_up USING ERRCODE = '22023';
    END IF;
END
$$;

-- _plan_task under the native declaration's names (window and from are keywords, which
-- PL/pgSQL code does better without), STRICT as the native one is.
CREATE FUNCTION rendezvous._plan_firings(schedule text, time_zone text, catch_up text, "window" interval,
                                         "from" timestamp with time zone, now timestamp with time zone,
                                         max_run integer)
RETURNS TABLE (run_at timestamp with time zone[], skipped bigint, next_fire_at timestamp with time zone)
LANGUAGE sql STRICT STABLE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM rendezvous._plan_task($1, $2, $3, $4, $5, $6, $7) $$;

-- `every <n> seconds` for an interval (months and fractions of a second refused).
CREATE FUNCTION rendezvous.every("interval" interval) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    micros numeric;
BEGIN
    IF "interval" IS NULL THEN
        RAISE EXCEPTION 'interval must not be NULL' USING ERRCODE = '22004';
    ELSIF extract(year FROM "interval") <> 0 OR extract(month FROM "interval") <> 0 THEN
        RAISE EXCEPTION 'interval must not contain months or years (got %): months vary in length', "interval"
            USING ERRCODE = '22023';
    END IF;
    micros := extract(day FROM "interval") * 86400000000
              + (extract(epoch FROM "interval") - extract(day FROM "interval") * 86400) * 1000000;
    IF micros % 1000000 <> 0 THEN
        RAISE EXCEPTION 'interval must be a whole number of seconds (got %)', "interval" USING ERRCODE = '22023';
    ELSIF micros / 1000000 NOT BETWEEN 1 AND 366 * 86400 THEN
        RAISE EXCEPTION 'interval must be between 1 second and 366 days (got %)', "interval" USING ERRCODE = '22023';
    END IF;
    RETURN 'every ' || (micros / 1000000)::bigint || ' seconds';
END
$$;

-- The key of _cron_parsed's MACs: made at install, readable by the owner alone (its
-- SECURITY DEFINER functions), never shown to a caller.
CREATE TABLE rendezvous._cron_key (
    key bytea NOT NULL
);
COMMENT ON TABLE rendezvous._cron_key IS 'Portable edition: the key that authenticates parsed schedules kept in session settings (_cron_parsed).';
INSERT INTO rendezvous._cron_key (key)
SELECT pg_catalog.sha256(pg_catalog.convert_to(pg_catalog.gen_random_uuid()::text || pg_catalog.gen_random_uuid()::text
                                        || pg_catalog.clock_timestamp()::text, 'UTF8'::name));
REVOKE ALL ON rendezvous._cron_key FROM PUBLIC;
