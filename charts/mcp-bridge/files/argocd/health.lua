-- Argo CD health of an mcpbridge.dev/v1alpha1 McpServer.
-- Argo CD runs this with the global `obj` (the live object) and the base and
-- table libraries only (no string library), and reads the table it returns.
-- It follows kstatus (which Flux uses) step by step, so that both read one
-- object the same way. A status the operator never wrote reads
-- observedGeneration -1 (the CRD's default), in progress for both; a status
-- without observedGeneration (only under a CRD from before that default) is
-- Progressing here, where kstatus's generic rule may call it Current. See
-- docs/integrations.md.

local function table_or_nil(v)
  if type(v) == "table" then
    return v
  end
  return nil
end

local function condition(status, kind)
  local conditions = table_or_nil(status.conditions)
  if conditions == nil then
    return nil
  end
  for _, c in ipairs(conditions) do
    if type(c) == "table" and c.type == kind then
      return c
    end
  end
  return nil
end

local function is_true(c)
  return c ~= nil and c.status == "True"
end

local function text(v)
  if type(v) == "string" and v ~= "" then
    return v
  end
  return nil
end

-- A terminal phase says why: the Ready condition's message, and for a
-- Failed server what the last connection attempt hit (an Invalid or
-- Conflict server never connected, so an older lastError would mislead).
local function degraded_message(status, ready, stalled)
  local c = ready or stalled
  local reason = c and text(c.reason)
  local message = (c and text(c.message)) or ("The server is " .. tostring(status.phase or "stalled"))
  local last = table_or_nil(status.lastError)
  if status.phase == "Failed" and last ~= nil and text(last.message) ~= nil then
    message = message .. "; last error (" .. tostring(text(last.stage) or "unknown stage") .. "): " .. last.message
  end
  if reason ~= nil then
    return reason .. ": " .. message
  end
  return message
end

local function health(o)
  local status = table_or_nil(o.status)
  -- A status the operator never wrote reads observedGeneration -1 (the
  -- CRD's default); one from before that default has none.
  if status == nil or status.observedGeneration == nil or status.observedGeneration == -1 then
    return {status = "Progressing", message = "Waiting for the operator to report status"}
  end
  local meta = table_or_nil(o.metadata) or {}
  if meta.generation ~= nil and status.observedGeneration ~= meta.generation then
    return {status = "Progressing", message = "Waiting for the operator to observe generation " ..
      tostring(meta.generation) .. " (status is of generation " .. tostring(status.observedGeneration) .. ")"}
  end
  local ready = condition(status, "Ready")
  local reconciling = condition(status, "Reconciling")
  local stalled = condition(status, "Stalled")
  if is_true(reconciling) then
    return {status = "Progressing", message = text(reconciling.message) or tostring(status.phase)}
  end
  -- The operator sets Stalled in every terminal phase (Failed, Invalid,
  -- Conflict) and Reconciling while on the way (Pending, Connecting,
  -- Reconnecting); reading the conditions, not the phase, keeps this
  -- script and kstatus of one mind.
  if is_true(stalled) then
    return {status = "Degraded", message = degraded_message(status, ready, stalled)}
  end
  -- Ready True covers Idle too: an idle server is healthy, its Ready
  -- condition stays True with reason Idle.
  if is_true(ready) then
    return {status = "Healthy", message = text(ready.message) or tostring(status.phase)}
  end
  return {status = "Progressing", message = (ready and text(ready.message)) or ("The server is " .. tostring(status.phase or "starting"))}
end

return health(obj)
