-- Default machine (ATM-37): a document nobody chose a machine for runs its Planner on the
-- favourite machine of a writer who opened it; that choice is marked, so that Default machine
-- (and only it) lets the document go again once nobody uses it. Additive: one column with a
-- default, and an index for the sweep that looks at Default machine's choices.

ALTER TABLE document_machines ADD COLUMN by_default INTEGER NOT NULL DEFAULT 0 CHECK (by_default IN (0, 1));
CREATE INDEX document_machines_by_default ON document_machines (by_default) WHERE by_default = 1;
