-- Floodgate's HTTP authorization door for HAProxy (>= 2.2; tested with Debian's 2.6), loaded by
-- haproxy.cfg beside this file:
--
--   http-request  lua.floodgate-authorize ADDRESS TIMEOUT_MS allow|deny
--   http-response lua.floodgate-headers
--
-- HAProxy has no authorization subrequest, so this action asks Floodgate itself, over a socket
-- (core.tcp), and speaks just enough HTTP/1.1 for Floodgate's answers. It does not use
-- core.httpclient: in HAProxy 2.6 that client retries a request whose answer timed out three
-- more times, and has no setting to stop it (httpclient.retries came later), so a hung
-- Floodgate would see each request four times and the client would wait four timeouts.
--
-- ADDRESS is one the socket connects to as it is: it resolves no name (hlua_socket_connect,
-- src/hlua.c, parses it with str2sa_range without PA_O_RESOLVE), so floodgate.ns.svc:9193 is
-- an error there. haproxy.cfg gives it abns@floodgate-authz, a `listen` section of its own that
-- passes the bytes to Floodgate's address, name or IP, which HAProxy resolves.
--
-- Floodgate's answer decides as Envoy's ext_authz http_service does
-- (source/extensions/filters/common/ext_authz/ext_authz_http_impl.cc, toResponse): a 2xx lets
-- the request through, its RateLimit headers kept for the client; any other status below 500 is
-- a denial, which the client gets as Floodgate sent it (status, headers, body: the 429 with
-- Retry-After and the JSON body, or the 400 or 431 of a request Floodgate could not read); a
-- 5xx, no answer within TIMEOUT_MS, or any error of this script is the failure mode, the last
-- argument: `allow` lets the request through marked (below), anything else answers 503. Each
-- failure is logged as a warning (the proxy's log servers, and HAProxy's stderr).

-- Set, to "true", on a request let through by the failure mode `allow`; a client's own is always
-- removed.
local FAILURE_HEADER = "x-floodgate-failure-mode-allowed"

-- Floodgate's headers the client gets when the request passes (Envoy's
-- allowed_client_headers_on_success); the application's own copies are removed.
local ON_SUCCESS = {
    "ratelimit-limit", "ratelimit-remaining", "ratelimit-reset",
    "ratelimit-policy", "ratelimit", "x-ratelimit-degraded",
}

-- Headers not copied from the client to Floodgate, nor from Floodgate's denial to the client:
-- hop-by-hop ones, the body's framing, and those this script writes itself.
local SKIP = {
    ["connection"] = true, ["keep-alive"] = true, ["proxy-connection"] = true, ["te"] = true,
    ["trailer"] = true, ["transfer-encoding"] = true, ["upgrade"] = true, ["expect"] = true,
    ["content-length"] = true, ["x-original-uri"] = true, ["x-original-method"] = true,
    ["x-forwarded-for"] = true, [FAILURE_HEADER] = true,
}

-- The most of Floodgate's answer this script reads; a larger one is an error.
local MAX_BODY = 65536

-- values lists a header's values from HAProxy's header table (indexed from 0).
local function values(t)
    local out = {}
    for i = 0, #t do
        if t[i] ~= nil then out[#out + 1] = t[i] end
    end
    return out
end

-- A header name HAProxy may hand over (an RFC 9110 token), and the bytes no value, URI or method
-- written into the request may hold: a CR or LF would end the line, letting the client write
-- headers of its own (a second X-Original-URI) or a second request. HAProxy's parsers never
-- produce either (src/h1.c ends a header line at LF and refuses a CR not before one; src/h2.c
-- refuses NUL, CR and LF in a value); this script does not rely on that.
local TOKEN = "^[%w!#$%%&'*+%-.^_`|~]+$"
local LINE_BREAK = "[\r\n]"

-- authorization builds the request to Floodgate: always GET /_floodgate, the client's headers,
-- the original URI and method, and X-Forwarded-For with the address HAProxy saw appended, so
-- that Floodgate's client_ip.trusted_hops counts the hops in front of HAProxy. It returns nil
-- for a request it cannot write faithfully (a header name that is not a token, a line break in
-- a value): the client's error, answered 400, never the failure mode.
local function authorization(txn)
    local lines = { "GET /_floodgate HTTP/1.1" }
    local function add(name, value)
        if not name:find(TOKEN) or value:find(LINE_BREAK) then return false end
        lines[#lines + 1] = name .. ": " .. value
        return true
    end
    local headers = txn.http:req_get_headers()
    local xff = {}
    for name, vs in pairs(headers) do
        if name == "x-forwarded-for" then
            xff = values(vs)
        elseif not SKIP[name] then
            for _, v in ipairs(values(vs)) do
                if not add(name, v) then return nil end
            end
        end
    end
    if headers["host"] == nil then add("host", "floodgate") end
    xff[#xff + 1] = txn.sf:src()
    -- No path (CONNECT's authority form): the request target as the client wrote it.
    local uri = txn.sf:pathq() or txn.sf:url() or ""
    if not (add("x-forwarded-for", table.concat(xff, ", ")) and add("x-original-uri", uri)
            and add("x-original-method", txn.sf:method())) then
        return nil
    end
    lines[#lines + 1] = "connection: close"
    return table.concat(lines, "\r\n") .. "\r\n\r\n"
end

-- ask sends request to addr and reads the answer within timeout seconds a step: its status,
-- headers (lower-case name -> list of values) and body, or nil and why there is none.
local function ask(addr, timeout, request)
    local sock = core.tcp()
    sock:settimeout(timeout)
    local function fail(why) sock:close(); return nil, nil, nil, why end
    local ok, err = sock:connect(addr)
    if not ok then return fail("cannot connect to " .. addr .. ": " .. tostring(err)) end
    ok, err = sock:send(request)
    if not ok then return fail("cannot send to " .. addr .. ": " .. tostring(err)) end
    local line = sock:receive("*l")
    if line == nil then return fail("no answer from " .. addr) end
    local status = tonumber(line:match("^HTTP/1%.[01] (%d%d%d)"))
    if not status then return fail("not an HTTP/1 status line from " .. addr) end
    local headers = {}
    while true do
        line = sock:receive("*l")
        if line == nil then return fail("answer cut short in its headers") end
        line = line:gsub("\r$", "")
        if line == "" then break end
        local name, value = line:match("^([^:%s]+):%s*(.-)%s*$")
        if name then
            name = name:lower()
            headers[name] = headers[name] or {}
            table.insert(headers[name], value)
        end
    end
    local body = ""
    local length = headers["content-length"] and tonumber(headers["content-length"][1])
    if length == nil then
        body = sock:receive("*a") -- no length: the answer ends with the connection
    elseif length > MAX_BODY then
        return fail("answer body over " .. MAX_BODY .. " bytes")
    elseif length > 0 then
        body = sock:receive(length)
    end
    sock:close()
    if body == nil then return nil, nil, nil, "answer cut short in its body" end
    if #body > MAX_BODY then return nil, nil, nil, "answer body over " .. MAX_BODY .. " bytes" end
    return status, headers, body
end

-- decide asks Floodgate about the request and returns what to do with it:
--   "allow", the headers to give the client (a 2xx);
--   "reply", the answer to give the client instead (Floodgate's denial; 400 for a request this
--            script cannot write);
--   "error", why (no answer, a 5xx): the failure mode decides.
-- It ends nothing itself: txn:done ends the action by raising a Lua error (hlua_done, src/hlua.c),
-- which the pcall around decide would catch.
local function decide(txn, addr, timeout_ms)
    local timeout = tonumber(timeout_ms)
    if timeout == nil then return "error", "TIMEOUT_MS " .. tostring(timeout_ms) .. " is not a number" end
    local request = authorization(txn)
    if request == nil then return "reply", { status = 400 } end
    local status, headers, body, why = ask(addr, timeout / 1000, request)
    if status == nil then return "error", why end
    if status >= 200 and status < 300 then
        local keep = {}
        for _, name in ipairs(ON_SUCCESS) do keep[name] = headers[name] end
        return "allow", keep
    end
    if status < 500 then
        local reply = { status = status, headers = {}, body = body }
        for name, vs in pairs(headers) do
            if not SKIP[name] and name ~= "date" and name ~= "server" then reply.headers[name] = vs end
        end
        if status == 429 and headers["grpc-retry-pushback-ms"] ~= nil then
            -- A gRPC call (Floodgate sends grpc-retry-pushback-ms when the request's content-type
            -- is gRPC). The 429 as it is would reach a gRPC client as UNAVAILABLE (grpc-go
            -- ignores grpc-status on a response that is not gRPC and maps the HTTP status:
            -- HTTPStatusConvTab), which clients retry at once; so the answer is trailers-only
            -- gRPC: 200, application/grpc, no body, grpc-status 8 (RESOURCE_EXHAUSTED) and
            -- grpc-retry-pushback-ms, which a client's retry policy waits for.
            reply.status, reply.body = 200, ""
            reply.headers["content-type"] = { "application/grpc" }
            reply.headers["grpc-status"] = { "8" }
            reply.headers["grpc-message"] = { "rate limited" }
        end
        return "reply", reply
    end
    return "error", "Floodgate answered " .. status
end

-- The action. HAProxy lets a request through when an action fails with a Lua error (hlua_action,
-- src/hlua.c: logged, then ACT_RET_CONT), so everything that can fail runs under pcall, and any
-- error, foreseen or not, meets the failure mode: `allow` passes the request marked, anything
-- else answers 503.
core.register_action("floodgate-authorize", { "http-req" }, function(txn, addr, timeout_ms, on_error)
    local ok, kind, arg = pcall(function()
        txn.http:req_del_header(FAILURE_HEADER)
        return decide(txn, addr, timeout_ms)
    end)
    if not ok then kind, arg = "error", tostring(kind) end
    if kind == "allow" then
        txn:set_priv(arg)
        return
    end
    if kind == "reply" then
        txn:done(arg)
        return
    end
    if on_error == "allow" then
        txn:Warning("floodgate-authorize: " .. tostring(arg) .. "; failure mode allow: request passed, marked " .. FAILURE_HEADER)
        txn.http:req_set_header(FAILURE_HEADER, "true")
        return
    end
    txn:Warning("floodgate-authorize: " .. tostring(arg) .. "; failure mode " .. tostring(on_error) .. ": 503")
    txn:done({ status = 503 })
end, 3)

core.register_action("floodgate-headers", { "http-res" }, function(txn)
    for _, name in ipairs(ON_SUCCESS) do txn.http:res_del_header(name) end
    local keep = txn:get_priv()
    if type(keep) ~= "table" then return end
    for _, name in ipairs(ON_SUCCESS) do
        for _, v in ipairs(keep[name] or {}) do txn.http:res_add_header(name, v) end
    end
end, 0)
