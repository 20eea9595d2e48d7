-- Writing from any language: courier_write adds a message to the outbox
-- and courier_schedule schedules one, each in the caller's transaction, with
-- the checks of Go's Message.Validate and its texts, so that a service in
-- Python, Node or plain SQL writes exactly the row Go's outbox.Writer
-- writes, or gets the error Go's would give:
--
--   SELECT courier_write('orders', 'order-42', 'OrderPlaced', '{"total":42}'::bytea,
--                        p_content_type => 'application/json');
--
-- An invalid message raises SQLSTATE 22023 (invalid_parameter_value) with
-- MESSAGE Go's ValidationError text ('courier: message.Topic is empty: set a
-- topic such as "orders"'), COLUMN the field, DETAIL the problem and HINT
-- the fix. The limits are Go's defaults unless the settings
-- courier.max_payload_bytes and courier.max_header_bytes say otherwise (SET,
-- ALTER ROLE … SET, ALTER DATABASE … SET; 0 or unset: the default), as
-- outbox.Config.Limits does for Go. The inserts fire the tables' wake-up
-- triggers (0005, 0011), as Go's do.
--
-- What text and jsonb cannot hold (NUL, invalid UTF-8) cannot reach these
-- functions, so their checks of it never fire; what Go's types cannot hold
-- (a NULL, headers that are not an object of strings) is answered here.

-- courier_uuidv7 returns a new UUIDv7 (RFC 9562): the Unix time in
-- milliseconds, by clock_timestamp(), then random bits, as Go's
-- courier.NewMessage gives.
CREATE FUNCTION courier_uuidv7() RETURNS uuid LANGUAGE sql VOLATILE AS $$
    SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
        PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
        FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid
$$;

-- courier_invalid raises the error of an invalid message: field, problem
-- and fix as Go's courier.ValidationError holds them.
CREATE FUNCTION courier_invalid(p_field text, p_problem text, p_fix text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('courier: message.%s %s: %s', p_field, p_problem, p_fix),
        COLUMN = p_field, DETAIL = p_problem, HINT = p_fix;
END
$$;

-- courier_limit returns the setting p_name as a number of bytes, or
-- p_default when it is unset, empty, 0 or negative (Go's zero Limits); at
-- most 2^31-1.
CREATE FUNCTION courier_limit(p_name text, p_default integer) RETURNS integer LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_text text := nullif(btrim(current_setting(p_name, true)), '');
BEGIN
    IF v_text IS NULL THEN
        RETURN p_default;
    END IF;
    IF v_text !~ '^[-+]?[0-9]{1,18}$' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('courier: the setting %s is %s: set it to a number of bytes, or 0 for the default (%s)',
                             p_name, quote_literal(v_text), p_default),
            HINT = format('SET %s = %s', p_name, p_default);
    END IF;
    IF v_text::bigint <= 0 THEN
        RETURN p_default;
    END IF;
    RETURN least(v_text::bigint, 2147483647)::integer;
END
$$;

-- courier_char_problem names the character p_char refused in a name:
-- "contains white space (U+0020)", "contains a control character
-- (U+0009)" (a character that is both, such as a tab, is a control
-- character).
CREATE FUNCTION courier_char_problem(p_char text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT format('contains %s (U+%s)',
                  CASE WHEN ascii(p_char) < 32 OR ascii(p_char) BETWEEN 127 AND 159
                       THEN 'a control character' ELSE 'white space' END,
                  upper(lpad(to_hex(ascii(p_char)), 4, '0')))
$$;

-- courier_name_problem is Go's checkName: p_value non-empty, at most p_max
-- bytes, without control characters (Unicode's Cc: U+0000–U+001F,
-- U+007F–U+009F) and, unless p_spaces, without white space (Unicode's
-- White_Space, as Go's unicode.IsSpace). It returns NULL when p_value
-- passes, else the problem and the fix (NULL: the field's own), the
-- character named by courier_char_problem. A SQL function, which a caller's
-- expression inlines: a call of a PL/pgSQL function per field cost the
-- write a fifth of its time.
CREATE FUNCTION courier_name_problem(p_value text, p_max integer, p_spaces boolean) RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN p_value IS NULL OR p_value = '' THEN ARRAY['is empty', NULL]
        WHEN octet_length(p_value) > p_max THEN
            ARRAY[format('is %s bytes, over the limit of %s', octet_length(p_value), p_max), 'shorten it']
        WHEN p_spaces AND p_value ~ E'[\u0001-\u001f\u007f-\u009f]' THEN
            ARRAY[courier_char_problem(substring(p_value FROM E'[\u0001-\u001f\u007f-\u009f]')), 'remove it']
        WHEN NOT p_spaces AND p_value ~ E'[\u0001-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]' THEN
            ARRAY[courier_char_problem(substring(p_value FROM E'[\u0001-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]')),
                  'remove it']
    END
$$;

-- courier_header_field names the header p_name as Go's errors do:
-- Headers["name"], the name's bytes 0x20–0x7E as they are but " and \
-- (written \" and \\), every other byte of its UTF-8 as \xhh.
CREATE FUNCTION courier_header_field(p_name text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_bytes bytea := convert_to(p_name, 'UTF8');
    v_out   text := '';
    v_byte  integer;
BEGIN
    FOR i IN 0 .. length(v_bytes) - 1 LOOP
        v_byte := get_byte(v_bytes, i);
        v_out := v_out || CASE
            WHEN v_byte = 34 THEN E'\\"'
            WHEN v_byte = 92 THEN E'\\\\'
            WHEN v_byte BETWEEN 32 AND 126 THEN chr(v_byte)
            ELSE E'\\x' || lpad(to_hex(v_byte), 2, '0')
        END;
    END LOOP;
    RETURN 'Headers["' || v_out || '"]';
END
$$;

-- courier_check_message applies Go's Message.Validate, in its order: id,
-- topic, key, type, version, content type, payload, occurred time, then
-- each header by name (bytewise order: name, then value), then the
-- headers' total size. It returns the headers to store: NULL when there
-- are none (as Go stores an empty map), else p_headers.
CREATE FUNCTION courier_check_message(p_message_id uuid, p_topic text, p_key text, p_type text, p_version integer,
                                      p_content_type text, p_payload bytea, p_headers jsonb, p_occurred_at timestamptz)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_max_payload integer := courier_limit('courier.max_payload_bytes', 1048576);
    v_max_headers integer := courier_limit('courier.max_header_bytes', 65536);
    v_name  text;
    v_value jsonb;
    v_text  text;
    v_lower text;
    v_size  bigint := 0;
    v_problem text[];
BEGIN
    -- The usual message, one that plainly passes every check, in one
    -- expression: PL/pgSQL prepares each expression it evaluates again in
    -- every transaction, and a check at a time cost a one-message
    -- transaction more than its insert. The expression is stricter than the
    -- checks (it takes the headers' JSON text, longer than their names and
    -- values, for their size): whatever it does not pass goes through the
    -- checks below, which name the first that fails.
    IF p_message_id <> '00000000-0000-0000-0000-000000000000' AND p_version >= 1
       AND octet_length(p_topic) BETWEEN 1 AND 255 AND octet_length(p_key) BETWEEN 1 AND 1024
       AND octet_length(p_type) BETWEEN 1 AND 255 AND octet_length(p_content_type) BETWEEN 1 AND 255
       AND (p_topic || p_type) !~ E'[\u0001-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]'
       AND (p_key || p_content_type) !~ E'[\u0001-\u001f\u007f-\u009f]'
       AND octet_length(p_payload) <= v_max_payload AND p_occurred_at <> '0001-01-01 00:00:00+00'
       AND (p_headers IS NULL OR jsonb_typeof(p_headers) = 'object' AND octet_length(p_headers::text) <= v_max_headers
            AND NOT jsonb_path_exists(p_headers, E'$.keyvalue() ? ('
                '!(@.key like_regex "^[-A-Za-z0-9!#$%&\'*+.^_`|~]+$") || @.value.type() != "string" || @.value like_regex "[\\r\\n]" '
                '|| (@.key like_regex "^(courier|nats)-" flag "i" && @.key != "Courier-Correlation-Id" && @.key != "Courier-Causation-Id") '
                '|| @.key like_regex "^(proxy|x-forwarded|content|sec|webhook|if)-" flag "i" '
                '|| @.key like_regex "^(authorization|www-authenticate|cookie2?|set-cookie2?|host|forwarded|via|max-forwards|origin|x-real-ip'
                '|x-http-method|x-http-method-override|x-method-override|x-original-url|x-rewrite-url|connection|keep-alive|te|trailer'
                '|transfer-encoding|upgrade|expect|range|accept-encoding)$" flag "i")'))
    THEN
        RETURN CASE WHEN p_headers = '{}' THEN NULL ELSE p_headers END;
    END IF;
    IF p_message_id = '00000000-0000-0000-0000-000000000000' THEN
        PERFORM courier_invalid('ID', 'is the nil UUID',
            'build messages with courier.NewMessage or courier.NewJSON, which set a UUIDv7');
    END IF;
    v_problem := courier_name_problem(p_topic, 255, false);
    IF v_problem IS NOT NULL THEN
        PERFORM courier_invalid('Topic', v_problem[1], coalesce(v_problem[2], 'set a topic such as "orders"'));
    END IF;
    v_problem := courier_name_problem(p_key, 1024, true);
    IF v_problem IS NOT NULL THEN
        PERFORM courier_invalid('Key', v_problem[1],
            coalesce(v_problem[2], 'set the ordering key, usually the aggregate id such as "order-42"'));
    END IF;
    v_problem := courier_name_problem(p_type, 255, false);
    IF v_problem IS NOT NULL THEN
        PERFORM courier_invalid('Type', v_problem[1], coalesce(v_problem[2], 'set the message type such as "OrderPlaced"'));
    END IF;
    IF p_version < 1 THEN
        PERFORM courier_invalid('Version', format('is %s', p_version), 'use 1 or more (courier.WithVersion)');
    END IF;
    v_problem := courier_name_problem(p_content_type, 255, true);
    IF v_problem IS NOT NULL THEN
        PERFORM courier_invalid('ContentType', v_problem[1], coalesce(v_problem[2], 'set a media type such as "application/json"'));
    END IF;
    IF octet_length(p_payload) > v_max_payload THEN
        PERFORM courier_invalid('Payload', format('is %s bytes, over the limit of %s', octet_length(p_payload), v_max_payload),
            'store large data elsewhere and send a reference, or raise the limit together with the broker''s');
    END IF;
    IF p_occurred_at = '0001-01-01 00:00:00+00' THEN
        PERFORM courier_invalid('OccurredAt', 'is not set', 'set when the event happened (courier.WithOccurredAt)');
    END IF;
    IF p_headers IS NULL OR jsonb_typeof(p_headers) = 'null' OR p_headers = '{}' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(p_headers) <> 'object' THEN
        PERFORM courier_invalid('Headers', format('is a JSON %s, not an object', jsonb_typeof(p_headers)),
            'pass the headers as a JSON object of names and string values, or NULL for none');
    END IF;
    FOR v_name, v_value IN SELECT e.key, e.value FROM jsonb_each(p_headers) e ORDER BY e.key COLLATE "C" LOOP
        -- Go's CheckHeaderName: an HTTP token, not reserved.
        IF v_name !~ '^[-A-Za-z0-9!#$%&''*+.^_`|~]+$' THEN
            PERFORM courier_invalid(courier_header_field(v_name), 'is not a valid header name',
                'use letters, digits and !#$%&''*+-.^_`|~ only, no spaces or colons');
        END IF;
        IF v_name NOT IN ('Courier-Correlation-Id', 'Courier-Causation-Id') THEN
            v_lower := lower(v_name COLLATE "C");
            IF v_lower LIKE 'courier-%' OR v_lower LIKE 'nats-%' THEN
                PERFORM courier_invalid(courier_header_field(v_name), 'uses a reserved prefix (Courier-, Nats-)',
                    'choose another name; Courier sets these headers itself and brokers act on them');
            END IF;
            IF v_lower ~ '^(proxy-|x-forwarded-|content-|sec-|webhook-|if-)' OR v_lower IN (
                'authorization', 'www-authenticate', 'cookie', 'cookie2', 'set-cookie', 'set-cookie2',
                'host', 'forwarded', 'via', 'max-forwards', 'origin', 'x-real-ip',
                'x-http-method', 'x-http-method-override', 'x-method-override', 'x-original-url', 'x-rewrite-url',
                'connection', 'keep-alive', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'expect', 'range',
                'accept-encoding') THEN
                PERFORM courier_invalid(courier_header_field(v_name),
                    'is a name HTTP acts on (credentials, routing, framing or a webhook signature)',
                    'choose another name; sent as a webhook''s request header it would change how the request is authenticated, routed or read');
            END IF;
        END IF;
        IF jsonb_typeof(v_value) <> 'string' THEN
            PERFORM courier_invalid(courier_header_field(v_name), format('is a JSON %s, not a string', jsonb_typeof(v_value)),
                'pass header values as JSON strings');
        END IF;
        v_text := v_value #>> '{}';
        IF v_text ~ E'[\r\n]' THEN
            PERFORM courier_invalid(courier_header_field(v_name), 'has a line break, NUL or invalid UTF-8 in its value',
                'encode the value (for example base64) or remove the offending characters');
        END IF;
        v_size := v_size + octet_length(v_name) + octet_length(v_text);
    END LOOP;
    IF v_size > v_max_headers THEN
        PERFORM courier_invalid('Headers', format('total %s bytes, over the limit of %s', v_size, v_max_headers),
            'move bulky metadata into the payload');
    END IF;
    RETURN p_headers;
END
$$;

-- courier_write validates a message (courier_check_message) and adds it to
-- the outbox in the caller's transaction, returning its id. A NULL id is a
-- new UUIDv7, a NULL occurred_at the time of the call (clock_timestamp());
-- a NULL payload is an empty one, a NULL version or content type the
-- default.
CREATE FUNCTION courier_write(p_topic text, p_key text, p_type text, p_payload bytea,
                              p_headers jsonb DEFAULT NULL,
                              p_content_type text DEFAULT 'application/octet-stream',
                              p_version integer DEFAULT 1, p_message_id uuid DEFAULT NULL,
                              p_occurred_at timestamptz DEFAULT NULL)
RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    v_id       uuid := coalesce(p_message_id, courier_uuidv7());
    v_payload  bytea := coalesce(p_payload, ''::bytea);
    v_ctype    text := coalesce(p_content_type, 'application/octet-stream');
    v_version  integer := coalesce(p_version, 1);
    v_occurred timestamptz := coalesce(p_occurred_at, clock_timestamp());
    v_headers  jsonb;
BEGIN
    v_headers := courier_check_message(v_id, p_topic, p_key, p_type, v_version, v_ctype, v_payload, p_headers, v_occurred);
    INSERT INTO courier_outbox (message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at)
    VALUES (v_id, p_topic, p_key, p_type, v_version, v_ctype, v_payload, v_headers, v_occurred);
    RETURN v_id;
END
$$;

-- courier_schedule is courier_write for a message due at p_due_at (Go's
-- outbox.Writer.Schedule): it waits in courier_outbox_scheduled until a
-- relay's release moves it into the outbox. For a delay, pass
-- now() + interval '30 minutes': due by the database's clock, as Go's
-- outbox.After. A NULL due time is refused, as Go refuses a zero one.
CREATE FUNCTION courier_schedule(p_due_at timestamptz, p_topic text, p_key text, p_type text, p_payload bytea,
                                 p_headers jsonb DEFAULT NULL,
                                 p_content_type text DEFAULT 'application/octet-stream',
                                 p_version integer DEFAULT 1, p_message_id uuid DEFAULT NULL,
                                 p_occurred_at timestamptz DEFAULT NULL)
RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    v_id       uuid := coalesce(p_message_id, courier_uuidv7());
    v_payload  bytea := coalesce(p_payload, ''::bytea);
    v_ctype    text := coalesce(p_content_type, 'application/octet-stream');
    v_version  integer := coalesce(p_version, 1);
    v_occurred timestamptz := coalesce(p_occurred_at, clock_timestamp());
    v_headers  jsonb;
BEGIN
    IF p_due_at IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'courier: schedule: the due time is NULL: pass when the message falls due, such as now() + interval ''30 minutes'', or call courier_write to publish it at once',
            COLUMN = 'due';
    END IF;
    v_headers := courier_check_message(v_id, p_topic, p_key, p_type, v_version, v_ctype, v_payload, p_headers, v_occurred);
    INSERT INTO courier_outbox_scheduled (due_at, created_at, message_id, topic, ordering_key, type, version, content_type,
                                          payload, headers, occurred_at)
    VALUES (p_due_at, now(), v_id, p_topic, p_key, p_type, v_version, v_ctype, v_payload, v_headers, v_occurred);
    RETURN v_id;
END
$$;
