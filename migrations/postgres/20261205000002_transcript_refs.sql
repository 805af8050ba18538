-- A Chat message's typed references (issue 28: the command a message runs, CMD-16): kept with
-- the message, so a saved request keeps them across a restart. Additive: one nullable column.
-- `refs` is the server's own JSON of the message's references, opaque to the database; NULL for
-- a message with none (every entry written before this migration).

ALTER TABLE chat_transcript ADD COLUMN refs TEXT;
