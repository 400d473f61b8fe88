"""English word lists for the demo corpus, grouped by topic (raw data, no logic)."""

# Each topic gets its own nouns, verbs and people so that documents about
# different topics share little vocabulary; that keeps topic-level statistics
# (and later near-duplicate detection) meaningful. Entries are comma separated
# strings only to keep this file readable; multi-word entries are allowed.
TOPICS: dict[str, dict[str, str]] = {
    "science": {
        "nouns": "experiment, molecule, telescope, hypothesis, sample, particle, cell, galaxy, enzyme, "
        "fossil, crystal, measurement, theory, microscope, planet, protein, signal, orbit, reaction, "
        "species, gene, comet",
        "adjectives": "careful, surprising, tiny, distant, stable, complex, faint, promising, unusual, precise, ancient",
        "verbs": "measure, observe, test, analyze, detect, publish, confirm, study, replicate, record, compare, describe",
        "roles": "the chemist, the astronomer, a graduate student, the lab director, the biologist, a physicist",
        "groups": "researchers, scientists, students, astronomers, biologists, reviewers",
        "places": "in the laboratory, at the observatory, near the research station, during the field study, "
        "on the university campus, under the old microscope",
    },
    "cooking": {
        "nouns": "recipe, sauce, onion, loaf, oven, skillet, baguette, soup, spice, pastry, broth, garlic clove, "
        "lemon, potato, tomato, noodle, dumpling, stew, pancake, salad, knife, marinade",
        "adjectives": "fresh, crispy, savory, tender, spicy, golden, creamy, simple, fragrant, hearty, warm",
        "verbs": "chop, stir, bake, simmer, roast, season, taste, slice, whisk, knead, fry, serve",
        "roles": "the chef, a home cook, the baker, my grandmother, the restaurant owner, a food critic",
        "groups": "cooks, bakers, diners, guests, families, beginners",
        "places": "in the kitchen, at the farmers market, over medium heat, in a cast iron pan, "
        "at the corner bakery, on the stove",
    },
    "travel": {
        "nouns": "train, passport, suitcase, village, harbor, museum, guidebook, ferry, mountain pass, hostel, "
        "itinerary, airport, map, beach, cathedral, market, bridge, island, trail, ticket, border crossing, campsite",
        "adjectives": "crowded, quiet, scenic, remote, charming, expensive, busy, narrow, colorful, peaceful, windy",
        "verbs": "visit, explore, book, pack, cross, photograph, reach, wander through, rent, plan, miss, recommend",
        "roles": "the tour guide, a backpacker, the ferry captain, our host, a travel writer, the hotel clerk",
        "groups": "tourists, travelers, locals, hikers, visitors, pilgrims",
        "places": "along the coast, in the old town, at the train station, near the border, on the island, "
        "in the mountains",
    },
    "sports": {
        "nouns": "match, goal, coach, stadium, season, tournament, referee, striker, marathon, racket, helmet, "
        "league, championship, penalty, relay, jersey, scoreboard, rookie, bicycle, pitch, rival, medal",
        "adjectives": "fast, tired, talented, determined, narrow, dramatic, young, strong, confident, aggressive, loyal",
        "verbs": "win, lose, train, defend, score, tackle, coach, kick, sprint, celebrate, practice, challenge",
        "roles": "the coach, the captain, a young striker, the goalkeeper, the referee, a veteran runner",
        "groups": "fans, players, athletes, runners, teammates, supporters",
        "places": "at the stadium, on the pitch, during the final, in the locker room, at the training ground, "
        "on the track",
    },
    "finance": {
        "nouns": "budget, loan, mortgage, stock, bond, portfolio, interest rate, dividend, invoice, account, pension, "
        "tax return, credit card, savings plan, market, fund, inflation report, salary, expense, balance sheet, "
        "startup, bank",
        "adjectives": "volatile, modest, cautious, profitable, risky, steady, quarterly, annual, private, generous, uncertain",
        "verbs": "invest in, save, borrow, repay, audit, sell, buy, review, report, forecast, spend, diversify",
        "roles": "the accountant, a financial adviser, the central bank, the chief executive, a small investor, "
        "the auditor",
        "groups": "investors, savers, analysts, borrowers, shareholders, economists",
        "places": "on the stock exchange, at the bank, in the annual report, during the last quarter, "
        "in the retirement account, on Wall Street",
    },
    "history": {
        "nouns": "empire, treaty, manuscript, castle, dynasty, revolution, monument, archive, battle, kingdom, colony, "
        "ruin, chronicle, emperor, merchant, siege, parliament, temple, coin, letter, map, port",
        "adjectives": "medieval, ancient, forgotten, powerful, royal, colonial, rare, bitter, famous, wealthy, early",
        "verbs": "conquer, rule, sign, discover, defend, record, build, rebuild, translate, examine, abolish, found",
        "roles": "the historian, an archaeologist, the king, a court scribe, the museum curator, a young soldier",
        "groups": "historians, archaeologists, scholars, soldiers, merchants, peasants",
        "places": "in the royal archive, along the old trade route, inside the castle walls, in the capital, "
        "near the ancient harbor, during the long war",
    },
    "technology": {
        "nouns": "smartphone, server, database, algorithm, laptop, network, sensor, battery, software update, chip, "
        "robot, browser, password, cloud service, satellite, keyboard, camera, app, processor, cable, screen, printer",
        "adjectives": "wireless, faster, open source, reliable, portable, digital, secure, outdated, efficient, "
        "powerful, cheap",
        "verbs": "install, update, debug, deploy, upgrade, download, configure, test, launch, design, replace, connect",
        "roles": "the engineer, a software developer, the system administrator, a product manager, "
        "the startup founder, an intern",
        "groups": "engineers, developers, users, programmers, designers, customers",
        "places": "in the data center, on the old laptop, at the tech conference, in the server room, "
        "in the mobile app, on the company network",
    },
    "health": {
        "nouns": "vaccine, clinic, diet, symptom, doctor, nurse, hospital, vitamin, exercise routine, blood test, "
        "heart rate, prescription, patient, therapy, sleep schedule, headache, fever, injury, muscle, checkup, "
        "medicine, habit",
        "adjectives": "healthy, chronic, mild, regular, balanced, severe, daily, gentle, painful, common, effective",
        "verbs": "treat, prevent, prescribe, examine, track, rest, stretch, monitor, reduce, improve, diagnose, "
        "recommend",
        "roles": "the doctor, a nurse, the physiotherapist, a family doctor, the pharmacist, a patient",
        "groups": "patients, doctors, nurses, adults, children, athletes",
        "places": "at the clinic, in the hospital, at home, in the waiting room, at the pharmacy, during the checkup",
    },
    "gardening": {
        "nouns": "seed, rose, tomato plant, shovel, compost heap, greenhouse, flower bed, hedge, lawn, seedling, "
        "weed, vine, tulip bulb, watering can, orchard, leaf, root, pot, fence, sunflower, herb, branch",
        "adjectives": "green, dry, fertile, shady, sunny, wild, overgrown, tidy, sturdy, blooming, muddy",
        "verbs": "plant, water, prune, dig up, harvest, weed, grow, trim, mulch, fertilize, transplant, cover",
        "roles": "the gardener, my neighbor, a landscape designer, the farmer, an old gardener, the nursery owner",
        "groups": "gardeners, farmers, neighbors, volunteers, beekeepers, growers",
        "places": "in the backyard, in the greenhouse, along the fence, in the vegetable patch, on the balcony, "
        "at the community garden",
    },
    "music": {
        "nouns": "song, guitar, piano, melody, concert, album, orchestra, drum, violin, chord, rhythm, choir, band, "
        "lyric, festival, record, trumpet, symphony, stage, microphone, playlist, tune",
        "adjectives": "loud, gentle, catchy, haunting, lively, classical, slow, electric, beautiful, famous, soft",
        "verbs": "play, compose, record, sing, tune, perform, rehearse, release, listen to, arrange, conduct, practice",
        "roles": "the conductor, a street musician, the drummer, the lead singer, a music teacher, the producer",
        "groups": "musicians, fans, singers, listeners, students, critics",
        "places": "on stage, in the recording studio, at the concert hall, at the summer festival, "
        "in the practice room, on the radio",
    },
}

# Inflection exceptions for the verbs and nouns above (everything else follows
# the regular spelling rules in lexicon.py).
IRREGULAR_PAST = {
    "win": "won", "lose": "lost", "repay": "repaid", "sell": "sold", "buy": "bought", "forecast": "forecast",
    "spend": "spent", "build": "built", "rebuild": "rebuilt", "dig": "dug", "grow": "grew", "sing": "sang",
}
DOUBLE_FINAL_CONSONANT = {"chop", "stir", "plan", "win", "debug", "dig", "trim"}
IRREGULAR_PLURAL = {
    "species": "species", "hypothesis": "hypotheses", "leaf": "leaves", "knife": "knives", "loaf": "loaves",
    "tomato": "tomatoes", "potato": "potatoes",
}

# Shared across topics.
FIRST_NAMES = (
    "Anna, Ben, Carlos, Diana, Elena, Farid, Grace, Hiro, Irene, James, Kofi, Laura, Mei, Nora, Omar, Priya, "
    "Quentin, Rosa, Samuel, Tara, Umar, Vera, William, Ximena, Yusuf, Zoe, Lucas, Ingrid, Mateo, Sofia, Daniel, "
    "Amara, Leo, Hannah, Victor, Chloe"
)
LAST_NAMES = (
    "Smith, Garcia, Okafor, Tanaka, Novak, Rossi, Schmidt, Kim, Patel, Johansson, Moreau, Silva, Nguyen, "
    "Kowalski, Haddad, Murphy, Ivanova, Costa, Fischer, Lindqvist, Mensah, Park, Brennan, Duarte, Hughes, "
    "Bauer, Sato, Walsh, Reyes, Olsen"
)
CONNECTORS = (
    "However, In addition, As a result, Meanwhile, For example, On the other hand, In the end, Surprisingly, "
    "At first, Later, Of course, In practice, To be fair, Even so, Not long after that, By contrast"
)  # lexicon.py appends the comma
TIME_PHRASES = (
    "last spring, every morning, in the late afternoon, after a long week, before the holidays, during the winter, "
    "on weekends, earlier this year, a few days later, at the end of the day, twice a month, the following summer, "
    "right after breakfast, late at night, over the past decade, for the third year in a row"
)
REASONS = (
    "because it saves time, because the weather was changing, since nobody had tried it before, "
    "so that everyone could follow along, after reading the instructions twice, to avoid another mistake, "
    "without asking for help, despite the tight budget, while the others waited outside, "
    "as the local tradition demands, even though it was raining, because the old method had failed, "
    "just to see what would happen, on the advice of a friend"
)
ADVERBS = (
    "carefully, quickly, slowly, quietly, eventually, finally, suddenly, often, rarely, gradually, patiently, "
    "barely, happily, reluctantly, proudly, nervously"
)
GENERAL_ADJECTIVES = (
    "important, useful, difficult, popular, interesting, reliable, expensive, familiar, confusing, rewarding, "
    "practical, tricky"
)
OUTCOMES = (
    "badly, surprisingly well, better than expected, exactly as planned, completely wrong, smoothly, "
    "about as well as anyone could hope"
)
ORDINALS = "first, second, third, fourth, fifth, sixth, seventh, last"
NUMBER_WORDS = "two, three, four, five, six, seven, eight, nine, ten, eleven, twelve"
PERIODS = "day, week, month, year, season"
MONTHS = "January, February, March, April, May, June, July, August, September, October, November, December"

# Fixed forum and book furniture; chosen whole, not filled from templates.
FORUM_OPENERS = (
    "Hi everyone,|Quick question.|Long time lurker, first post.|Hello all!|Update:|Hey folks,|"
    "Thanks for all the replies so far.|Not sure if this is the right board, but here goes.|"
    "Sorry if this has been asked before.|Good morning from a rainy town!"
)
FORUM_CLOSERS = (
    "Thanks in advance!|Any advice would be appreciated.|Cheers.|Hope this helps someone.|"
    "Edit: fixed a typo.|Let me know what you think.|I will post an update next week.|Thanks for reading!"
)
SPEECH_VERBS = "said, replied, answered, whispered, admitted, explained, insisted, added"
