"""A small multilingual memory set: turns in Chinese, Japanese, Korean, German, French and
Spanish, each with a paraphrased question in its own language and one in English.

The questions are written to share as few words with their memory as a person asking later
would: the point is recall by meaning, not by the same words. English turns of everyday chat
stand beside them as distractors.
"""

from __future__ import annotations

__all__ = ["DISTRACTORS", "MEMORIES"]

# (language, memory, paraphrased question in that language, question in English)
MEMORIES: tuple[tuple[str, str, str, str], ...] = (
    (
        "zh",
        "我们决定下个月搬到杭州，因为公司在那边开了新办公室。",
        "他们为什么要换城市？",
        "Why are they relocating to another city?",
    ),
    (
        "zh",
        "我对花生过敏，吃了会呼吸困难。",
        "我有什么食物不能吃？",
        "Which food triggers my allergy?",
    ),
    (
        "zh",
        "女儿下周六要参加钢琴比赛，她练习了三个月。",
        "孩子周末有什么演出？",
        "What competition is my daughter taking part in?",
    ),
    (
        "zh",
        "新项目的数据库选用了PostgreSQL，主要是为了JSONB支持。",
        "项目最后用了哪种存储？",
        "Which database was chosen for the new project?",
    ),
    (
        "zh",
        "医生说我的血压偏高，建议每天少吃盐多运动。",
        "体检后大夫给了什么建议？",
        "What did the doctor recommend about my health?",
    ),
    (
        "zh",
        "我们的猫叫小白，今年三岁，特别喜欢晒太阳。",
        "家里的宠物多大了？",
        "How old is our cat?",
    ),
    (
        "zh",
        "周五晚上的团队聚餐改到了四川火锅店。",
        "同事们这周去哪吃饭？",
        "Where is the team dinner this week?",
    ),
    (
        "zh",
        "我正在学习西班牙语，每天早上练习二十分钟。",
        "我最近在学哪门外语？",
        "Which foreign language am I learning?",
    ),
    (
        "ja",
        "来月から大阪の支社に転勤することになりました。",
        "どこへ異動するのですか？",
        "Where am I being transferred to for work?",
    ),
    (
        "ja",
        "毎朝六時に起きて近所の公園をジョギングしています。",
        "朝の運動の習慣は何ですか？",
        "What is my morning exercise routine?",
    ),
    (
        "ja",
        "妻の誕生日は十月十二日なので、レストランを予約しました。",
        "奥さんのお祝いの準備は？",
        "What did I book for my wife's birthday?",
    ),
    (
        "ja",
        "サーバーの障害はディスク容量の不足が原因でした。",
        "システムが止まった理由は？",
        "What caused the server outage?",
    ),
    (
        "ja",
        "息子はサッカー部に入って、毎週土曜日に試合があります。",
        "子どもはどんな部活をしていますか？",
        "Which sport does my son play?",
    ),
    (
        "ja",
        "コーヒーは苦手なので、いつも緑茶を飲んでいます。",
        "普段の飲み物は何ですか？",
        "What do I usually drink instead of coffee?",
    ),
    (
        "ja",
        "夏休みに家族で北海道へ旅行する予定です。",
        "休暇の旅行先はどこですか？",
        "Where is the family going on summer vacation?",
    ),
    (
        "ja",
        "新しいノートパソコンはメモリが三十二ギガあります。",
        "買ったパソコンの性能は？",
        "How much memory does the new laptop have?",
    ),
    (
        "ko",
        "다음 달에 부산으로 이사하기로 결정했어요.",
        "어느 도시로 옮기나요?",
        "Which city are we moving to next month?",
    ),
    (
        "ko",
        "저는 매운 음식을 못 먹어서 김치도 잘 안 먹어요.",
        "입맛에 맞지 않는 음식은?",
        "What kind of food can't I eat?",
    ),
    (
        "ko",
        "동생이 올해 대학교를 졸업하고 은행에 취직했어요.",
        "동생은 지금 어디서 일하나요?",
        "Where did my younger sibling get a job?",
    ),
    (
        "ko",
        "주말마다 한강에서 자전거를 타요.",
        "쉬는 날에 무슨 운동을 하나요?",
        "What do I do for exercise on weekends?",
    ),
    (
        "ko",
        "회의는 화요일 오후 세 시로 옮겨졌습니다.",
        "미팅 시간이 언제로 바뀌었어요?",
        "When was the meeting rescheduled to?",
    ),
    ("ko", "우리 강아지 이름은 초코이고 다섯 살이에요.", "반려견의 나이는?", "How old is our dog?"),
    (
        "ko",
        "배포 스크립트는 이제 쿠버네티스 대신 도커 컴포즈를 써요.",
        "서비스를 어떤 도구로 띄우나요?",
        "Which tool do the deploy scripts use now?",
    ),
    (
        "ko",
        "어머니께서 다음 주에 무릎 수술을 받으세요.",
        "가족 중에 누가 병원에 가나요?",
        "Who in my family is having surgery?",
    ),
    (
        "de",
        "Wir haben beschlossen, die Donaudampfschifffahrtsgesellschaft zu verkaufen.",
        "Was passiert mit der Reederei?",
        "What will happen to the shipping company?",
    ),
    (
        "de",
        "Meine Tochter beginnt im September ihre Ausbildung zur Krankenpflegerin.",
        "Welchen Beruf lernt das Kind?",
        "What training is my daughter starting?",
    ),
    (
        "de",
        "Der Kühlschrank ist kaputt, der Techniker kommt am Donnerstag.",
        "Wann wird das Küchengerät repariert?",
        "When will the fridge be repaired?",
    ),
    (
        "de",
        "Ich trinke keinen Alkohol mehr seit dem Neujahrstag.",
        "Worauf verzichte ich seit Januar?",
        "What did I give up at New Year?",
    ),
    (
        "de",
        "Unser Team verwendet jetzt Rust statt Go für die Netzwerkdienste.",
        "Welche Programmiersprache nutzen wir für Server?",
        "Which language does the team use now?",
    ),
    (
        "de",
        "Die Hochzeit meines Bruders findet im Mai in Hamburg statt.",
        "Wo heiratet mein Geschwister?",
        "Where is my brother getting married?",
    ),
    (
        "de",
        "Ich habe mir beim Skifahren das Handgelenk gebrochen.",
        "Wie habe ich mich im Winterurlaub verletzt?",
        "How did I get injured?",
    ),
    (
        "de",
        "Wir sparen für ein Haus mit Garten am Stadtrand.",
        "Wofür legen wir Geld zurück?",
        "What are we saving money for?",
    ),
    (
        "fr",
        "Nous avons adopté un chaton qui s'appelle Biscuit.",
        "Quel est le nom du nouvel animal ?",
        "What is the name of our new kitten?",
    ),
    (
        "fr",
        "Je suis végétarienne depuis trois ans, je ne mange plus de viande.",
        "Quel régime alimentaire je suis ?",
        "What diet do I follow?",
    ),
    (
        "fr",
        "Le lancement du produit est repoussé au mois de mars.",
        "Quand sortira la nouvelle offre ?",
        "When will the product launch now?",
    ),
    (
        "fr",
        "Mon grand-père a fêté ses quatre-vingt-dix ans dimanche.",
        "Quel âge a mon aïeul ?",
        "How old is my grandfather?",
    ),
    (
        "fr",
        "J'ai commencé des cours de violon le mardi soir.",
        "Quel instrument j'apprends ?",
        "Which instrument am I learning?",
    ),
    (
        "fr",
        "La facture d'électricité a doublé depuis l'hiver.",
        "Pourquoi les dépenses d'énergie ont augmenté ?",
        "What happened to the electricity bill?",
    ),
    (
        "fr",
        "Nous partons en randonnée dans les Pyrénées au mois d'août.",
        "Où allons-nous marcher cet été ?",
        "Where are we hiking in the summer?",
    ),
    (
        "fr",
        "Le serveur de production utilise maintenant PostgreSQL 16.",
        "Quelle version de la base tourne en prod ?",
        "Which database version runs in production?",
    ),
    (
        "es",
        "Mi hermana se mudó a Buenos Aires para estudiar medicina.",
        "¿Qué carrera estudia mi hermana?",
        "What is my sister studying?",
    ),
    (
        "es",
        "Soy alérgico a los gatos, no puedo tener uno en casa.",
        "¿Qué mascota me hace daño?",
        "Which animal am I allergic to?",
    ),
    (
        "es",
        "La reunión con el cliente se canceló por la huelga de transporte.",
        "¿Por qué no hubo encuentro con el comprador?",
        "Why was the client meeting called off?",
    ),
    (
        "es",
        "Empecé a correr maratones el año pasado, ya terminé dos.",
        "¿Cuántas carreras largas he completado?",
        "How many marathons have I finished?",
    ),
    (
        "es",
        "Nuestro hijo aprendió a nadar este verano en la piscina municipal.",
        "¿Qué habilidad nueva tiene el niño?",
        "What did our son learn this summer?",
    ),
    (
        "es",
        "Compramos un coche eléctrico porque la gasolina está carísima.",
        "¿Qué vehículo adquirimos y por qué?",
        "Why did we buy an electric car?",
    ),
    (
        "es",
        "El abuelo cocina paella todos los domingos para la familia.",
        "¿Qué plato prepara el abuelo el fin de semana?",
        "What does grandpa cook on Sundays?",
    ),
    (
        "es",
        "La aplicación móvil ahora guarda los datos sin conexión.",
        "¿Qué mejora tiene la app?",
        "What new feature does the mobile app have?",
    ),
)

# English turns of everyday chat that answer none of the questions.
DISTRACTORS: tuple[str, ...] = (
    "I watched a documentary about deep sea creatures last night.",
    "The printer on the third floor keeps jamming.",
    "Can you send me the slides from yesterday's talk?",
    "It rained all weekend so we stayed in and played board games.",
    "My neighbour's tomatoes are growing really well this year.",
    "I think the train will be late again tomorrow morning.",
    "We finished the puzzle with a thousand pieces.",
    "The museum has a new exhibition on ancient Egypt.",
    "I need to renew my passport before the autumn.",
    "Our book club is reading a novel about lighthouse keepers.",
    "The coffee machine at work finally got fixed.",
    "I started knitting a scarf for the winter.",
    "The concert tickets sold out in ten minutes.",
    "We planted two apple trees in the backyard.",
    "My phone battery drains fast since the last update.",
    "The kids built a snowman in the garden.",
    "I'm thinking about repainting the living room blue.",
    "The library extended its opening hours on weekdays.",
    "We saw a family of deer on the drive home.",
    "The bakery around the corner makes great croissants.",
)
