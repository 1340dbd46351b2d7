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
-- Floodgate's answer decides as Envoy's ext_authz http_service does
-- (source/extensions/filters/common/ext_authz/ext_authz_http_impl.cc, toResponse): a 2xx lets
-- the request through, its RateLimit headers kept for the client; a 5xx, or no answer within
-- TIMEOUT_MS, is an error, handled by the last argument; any other status is a denial, which the
-- client gets as Floodgate sent it (status, headers, body: the 429, Retry-After, the JSON body).

-- Set, to "true", on a request let through because Floodgate did not answer; a client's own is
-- always removed.
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

-- authorization builds the request to Floodgate: always GET /_floodgate, the client's headers,
-- the original URI and method, and X-Forwarded-For with the address HAProxy saw appended, so
-- that Floodgate's client_ip.trusted_hops counts the hops in front of HAProxy.
local function authorization(txn)
    local lines = { "GET /_floodgate HTTP/1.1" }
    local headers = txn.http:req_get_headers()
    local xff = {}
    for name, vs in pairs(headers) do
        if name == "x-forwarded-for" then
            xff = values(vs)
        elseif not SKIP[name] then
            for _, v in ipairs(values(vs)) do lines[#lines + 1] = name .. ": " .. v end
        end
    end
    if headers["host"] == nil then lines[#lines + 1] = "host: floodgate" end
    xff[#xff + 1] = txn.sf:src()
    lines[#lines + 1] = "x-forwarded-for: " .. table.concat(xff, ", ")
    lines[#lines + 1] = "x-original-uri: " .. txn.sf:pathq()
    lines[#lines + 1] = "x-original-method: " .. txn.sf:method()
    lines[#lines + 1] = "connection: close"
    return table.concat(lines, "\r\n") .. "\r\n\r\n"
end

-- ask sends request to addr and reads the answer within timeout seconds a step: its status,
-- headers (lower-case name -> list of values) and body, or nil when there is none to read.
local function ask(addr, timeout, request)
    local sock = core.tcp()
    sock:settimeout(timeout)
    local function fail() sock:close(); return nil end
    if not sock:connect(addr) or not sock:send(request) then return fail() end
    local line = sock:receive("*l")
    local status = line and tonumber(line:match("^HTTP/1%.[01] (%d%d%d)"))
    if not status then return fail() end
    local headers = {}
    while true do
        line = sock:receive("*l")
        if line == nil then return fail() end
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
        return fail()
    elseif length > 0 then
        body = sock:receive(length)
    end
    sock:close()
    if body == nil or #body > MAX_BODY then return nil end
    return status, headers, body
end

core.register_action("floodgate-authorize", { "http-req" }, function(txn, addr, timeout_ms, on_error)
    txn.http:req_del_header(FAILURE_HEADER)
    local status, headers, body = ask(addr, tonumber(timeout_ms) / 1000, authorization(txn))
    if status and status >= 200 and status < 300 then
        local keep = {}
        for _, name in ipairs(ON_SUCCESS) do keep[name] = headers[name] end
        txn:set_priv(keep)
        return
    end
    if status and status < 500 then
        local reply = { status = status, headers = {}, body = body }
        for name, vs in pairs(headers) do
            if not SKIP[name] and name ~= "date" and name ~= "server" then reply.headers[name] = vs end
        end
        txn:done(reply)
        return
    end
    if on_error == "deny" then
        txn:done({ status = 503 })
        return
    end
    txn.http:req_set_header(FAILURE_HEADER, "true")
end, 3)

core.register_action("floodgate-headers", { "http-res" }, function(txn)
    for _, name in ipairs(ON_SUCCESS) do txn.http:res_del_header(name) end
    local keep = txn:get_priv()
    if type(keep) ~= "table" then return end
    for _, name in ipairs(ON_SUCCESS) do
        for _, v in ipairs(keep[name] or {}) do txn.http:res_add_header(name, v) end
    end
end, 0)
